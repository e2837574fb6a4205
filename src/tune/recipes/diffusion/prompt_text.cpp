#include "tune/recipes/diffusion/prompt_text.h"

#include "tune/data/python_str.h"

namespace tune::recipes::diffusion_common {

std::string preprocess_prompt(const std::string& prompt) { return data::python_strip(data::python_lower(prompt)); }

}  // namespace tune::recipes::diffusion_common
