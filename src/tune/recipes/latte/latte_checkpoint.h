// Latte's checkpoints are the video recipes' shared layout (recipes/diffusion/diffusion_checkpoint.h) with official
// parameter names and latte_config.json; this is what sampling reads from one.
#pragma once

#include <filesystem>

#include "tune/models/latte.h"

namespace tune::recipes::latte {

// The EMA weights of a checkpoint into `model` (what sampling uses); model.safetensors when there is no EMA file.
void load_sampling_weights(const std::filesystem::path& dir, models::Latte& model);

}  // namespace tune::recipes::latte
