// Shared checkpoint file helpers.
#include "tune/recipes/checkpoint_files.h"

#include <ATen/CPUGeneratorImpl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <mutex>
#include <unordered_set>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
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

std::string optimizer_shard_file(int rank, int ranks) {
  return fmt::format("optimizer.rank-{}-of-{}.safetensors", rank, ranks);
}

namespace {

// The step a checkpoint directory's name says (checkpoints/step-N), if it has that form.
std::optional<int64_t> step_of_checkpoint_name(const std::filesystem::path& dir) {
  const std::string name = dir.filename().string();
  long long step = 0;
  int length = 0;
  if (std::sscanf(name.c_str(), "step-%lld%n", &step, &length) == 1 && static_cast<size_t>(length) == name.size()) {
    return static_cast<int64_t>(step);
  }
  return std::nullopt;
}

}  // namespace

std::map<std::string, std::string> optimizer_shard_metadata(int rank, int ranks, int64_t step) {
  return {{"tune.rank", std::to_string(rank)}, {"tune.world_size", std::to_string(ranks)},
          {"tune.step", std::to_string(step)}};
}

std::vector<std::pair<std::string, torch::Tensor>> read_optimizer_file(const std::filesystem::path& dir,
                                                                       const std::string& name) {
  const auto path = dir / name;
  const auto file = io::SafetensorsFile::open(path);
  int rank = 0, ranks = 0;
  if (std::sscanf(name.c_str(), "optimizer.rank-%d-of-%d.safetensors", &rank, &ranks) == 2) {
    const auto& metadata = file.metadata();
    const auto expect = [&](const char* key, const std::string& wanted, const char* what) {
      const auto found = metadata.find(key);
      if (found != metadata.end() && found->second != wanted) {
        throw InputError(fmt::format("{}: damaged checkpoint: this file holds the optimizer state of {} {}, not {} (its "
                                     "header's {}); each rank's file must stay under its own name, in the checkpoint "
                                     "that wrote it", path.string(), what, found->second, wanted, key));
      }
    };
    expect("tune.rank", std::to_string(rank), "rank");
    expect("tune.world_size", std::to_string(ranks), "a run of world size");
    if (const auto step = step_of_checkpoint_name(dir)) expect("tune.step", std::to_string(*step), "step");
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& entry : file.entries()) tensors.emplace_back(entry.first, file.load(entry.first));
  return tensors;
}

std::vector<std::string> optimizer_state_files(const std::filesystem::path& dir) {
  std::error_code error;
  if (std::filesystem::is_regular_file(dir / kOptimizerStateFile, error)) return {kOptimizerStateFile};
  // Shards: the count comes from their names, and every rank of that count must be there.
  int ranks = 0;
  if (std::filesystem::is_directory(dir, error)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      int rank = 0, count = 0;
      const std::string name = entry.path().filename().string();
      if (std::sscanf(name.c_str(), "optimizer.rank-%d-of-%d.safetensors", &rank, &count) != 2 || count < 1) continue;
      if (ranks != 0 && count != ranks) {
        throw InputError(fmt::format("{}: damaged checkpoint: optimizer shards of {} and of {} ranks side by side",
                                     dir.string(), ranks, count));
      }
      ranks = count;
    }
  }
  if (ranks == 0) return {kOptimizerStateFile};  // neither: require_checkpoint_files names the single file
  std::vector<std::string> files;
  for (int rank = 0; rank < ranks; ++rank) files.push_back(optimizer_shard_file(rank, ranks));
  return files;
}

std::vector<std::pair<std::string, torch::Tensor>> read_optimizer_state(
    const std::filesystem::path& dir, const std::function<bool(const std::string& param)>& wanted) {
  const auto files = optimizer_state_files(dir);
  require_checkpoint_files(dir, files);
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& name : files) {
    for (auto& [key, tensor] : read_optimizer_file(dir, name)) {
      // full_shard's flat parameters (distributed/fully_sharded.cpp names them "<unit>.flat_<dtype>_...").
      if (key.find(".flat_") != std::string::npos) {
        throw InputError(fmt::format("{}: its optimizer state was written by distributed.strategy full_shard (flat "
                                     "parameter shards, entry '{}'); resume it with full_shard and two or more "
                                     "processes", (dir / name).string(), key));
      }
      const auto dot = key.rfind('.');
      if (dot != std::string::npos && wanted(key.substr(0, dot))) state.emplace_back(key, std::move(tensor));
    }
  }
  return state;
}

std::function<bool(const std::string& param)> parameters_of(const train::AdamW& optimizer) {
  auto names = std::make_shared<std::unordered_set<std::string>>();
  for (const auto& group : optimizer.groups()) {
    for (const auto& param : group.params) names->insert(param.name);
  }
  return [names](const std::string& param) { return names->count(param) > 0; };
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

nlohmann::json trainer_progress_json(const TrainerProgress& progress) {
  return {{"step", progress.step},
          {"epoch", progress.loader.epoch},
          {"batch_in_epoch", progress.loader.batch_in_epoch},
          {"rows_per_batch", progress.loader.rows_per_batch},
          {"elapsed_s", progress.elapsed_s},
          {"loss_scale", progress.loss_scale},
          {"loss_scale_clean_steps", progress.loss_scale_clean_steps},
          {"skipped_steps", progress.skipped_steps}};
}

nlohmann::json read_trainer_progress(const std::filesystem::path& dir, TrainerProgress& progress) {
  const auto path = dir / "trainer_state.json";
  nlohmann::json json = read_json_file(path);
  if (!json.is_object()) throw InputError(fmt::format("{}: not a JSON object", path.string()));
  const io::JsonFields fields(json, path.string());
  progress.step = fields.integer("step");
  const auto named_step = step_of_checkpoint_name(dir);
  if (progress.step < 0 || (named_step && progress.step != *named_step)) {
    throw InputError(fmt::format("{}: damaged checkpoint: \"step\" is {}, expected {}", path.string(), progress.step,
                                 named_step ? fmt::format("{} (the directory's name)", *named_step)
                                            : std::string("a count of steps >= 0")));
  }
  progress.loader.epoch = fields.integer("epoch");
  progress.loader.batch_in_epoch = fields.integer("batch_in_epoch");
  progress.loader.rows_per_batch = fields.integer("rows_per_batch", 0);
  progress.elapsed_s = fields.real("elapsed_s");
  progress.loss_scale = fields.real("loss_scale", 0.0);
  progress.loss_scale_clean_steps = fields.integer("loss_scale_clean_steps", 0);
  progress.skipped_steps = fields.integer("skipped_steps", 0);
  return json;
}

}  // namespace tune::recipes
