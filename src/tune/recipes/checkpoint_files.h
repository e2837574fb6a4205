// Pieces every recipe's checkpoint uses: JSON files, named tensor files, and the CPU RNG state.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tune::recipes {

void write_json_file(const std::filesystem::path& path, const nlohmann::json& json);
// Throws tune::InputError naming the file when it is missing or not JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Every tensor of a safetensors file, in the file's order.
std::vector<std::pair<std::string, torch::Tensor>> read_named_tensors(const std::filesystem::path& path);

torch::Tensor cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);

}  // namespace tune::recipes
