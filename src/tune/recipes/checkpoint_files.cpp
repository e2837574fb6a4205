// Shared checkpoint file helpers.
#include "tune/recipes/checkpoint_files.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "tune/core/error.h"
#include "tune/io/safetensors.h"

namespace tune::recipes {

std::vector<std::pair<std::string, torch::Tensor>> read_named_tensors(const std::filesystem::path& path) {
  const auto file = io::SafetensorsFile::open(path);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& entry : file.entries()) tensors.emplace_back(entry.first, file.load(entry.first));
  return tensors;
}

torch::Tensor cpu_rng_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const torch::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace tune::recipes
