// Shared checkpoint file helpers.
#include "tune/recipes/checkpoint_files.h"

#include <ATen/CPUGeneratorImpl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <mutex>

#include "tune/core/error.h"
#include "tune/io/run_checkpoints.h"
#include "tune/io/safetensors.h"

namespace tune::recipes {

void require_checkpoint_files(const std::filesystem::path& dir, const std::vector<std::string>& names) {
  std::vector<std::string> missing;
  std::error_code error;
  for (const auto& name : names) {
    if (!std::filesystem::is_regular_file(dir / name, error)) missing.push_back(name);
  }
  if (missing.empty()) return;
  const bool marked = std::filesystem::exists(dir / io::kCheckpointCompleteMarker, error);
  throw InputError(fmt::format(
      "{}: damaged checkpoint: {} {} missing{}. HINT: use an earlier checkpoint of the run (checkpoints/step-N), "
      "or delete this one so that --resume picks the newest intact one",
      dir.string(), fmt::join(missing, ", "), missing.size() == 1 ? "is" : "are",
      marked ? fmt::format(" although the directory is marked {}", io::kCheckpointCompleteMarker) : ""));
}

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
