// The prompt text preprocessing diffusers' text-to-image/video pipelines share (LattePipeline, SanaPipeline:
// _text_preprocessing without clean_caption).
#pragma once

#include <string>

namespace tune::recipes::diffusion_common {

// Python's str.lower().strip() (data/python_str.h).
std::string preprocess_prompt(const std::string& prompt);

}  // namespace tune::recipes::diffusion_common
