// Pieces every recipe's checkpoint uses: JSON files, named tensor files, and the CPU RNG state.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tune/io/json_file.h"

namespace tune::recipes {

using io::read_json_file;
using io::write_json_file;

// A checkpoint is marked COMPLETE only once every file is in it, but files can go missing afterwards (a run of an
// older tune killed while pruning it file by file, a user's rm). Readers call this first so the user learns which
// file is gone, instead of an error from deep inside a reader. Throws InputError naming the directory and every
// one of `names` it lacks.
void require_checkpoint_files(const std::filesystem::path& dir, const std::vector<std::string>& names);

// Every tensor of a safetensors file, in the file's order.
std::vector<std::pair<std::string, torch::Tensor>> read_named_tensors(const std::filesystem::path& path);

torch::Tensor cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);

}  // namespace tune::recipes
