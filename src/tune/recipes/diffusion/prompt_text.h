// The prompt text preprocessing diffusers' text-to-image/video pipelines share (LattePipeline, SanaPipeline:
// _text_preprocessing without clean_caption).
#pragma once

#include <string>

namespace tune::recipes::diffusion_common {

// Python's str.lower().strip() for ASCII text; non-ASCII letters are kept as they are.
std::string preprocess_prompt(const std::string& prompt);

}  // namespace tune::recipes::diffusion_common
