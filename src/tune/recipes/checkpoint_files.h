// Pieces every recipe's checkpoint uses: JSON files, named tensor files, and the CPU RNG state.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tune/data/sft_loader.h"
#include "tune/io/json_file.h"
#include "tune/train/adamw.h"

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

// Optimizer state in a checkpoint: optimizer.safetensors when one process holds all of it (single process, ddp);
// under shard_grad_op one file per rank, optimizer.rank-R-of-N.safetensors, each named per parameter.
inline constexpr const char* kOptimizerStateFile = "optimizer.safetensors";
std::string optimizer_shard_file(int rank, int ranks);
// What a rank's optimizer file records about itself ("tune.rank", "tune.world_size", "tune.step"), and the reader
// that checks it against the file's name and the checkpoint's step: a rank file renamed, copied over another or
// from another checkpoint is an error naming it, not a silently different optimizer state. (Files written before
// the metadata existed, session 11 and earlier, have none and are read unchecked.)
std::map<std::string, std::string> optimizer_shard_metadata(int rank, int ranks, int64_t step);
std::vector<std::pair<std::string, torch::Tensor>> read_optimizer_file(const std::filesystem::path& dir,
                                                                       const std::string& name);
// The optimizer-state files of `dir` (the single file, or every rank's shard): what require_checkpoint_files must
// find. Throws InputError when there is neither, or when shards are missing or disagree on their count.
std::vector<std::string> optimizer_state_files(const std::filesystem::path& dir);
// The entries of those files that belong to the parameters `wanted` accepts (an entry "<param>.<field>" belongs
// to <param>), whatever number of ranks wrote them: a rank resuming with another world size takes its own share.
std::vector<std::pair<std::string, torch::Tensor>> read_optimizer_state(
    const std::filesystem::path& dir, const std::function<bool(const std::string& param)>& wanted);
// How a trainer reads its optimizer state from a checkpoint directory; empty: read_optimizer_state filtered by
// parameters_of(optimizer) (full_shard passes DataParallel::read_sharded_optimizer_state).
using OptimizerStateReader =
    std::function<std::vector<std::pair<std::string, torch::Tensor>>(const std::filesystem::path& dir)>;
// The parameter names an optimizer updates, as the filter for read_optimizer_state.
std::function<bool(const std::string& param)> parameters_of(const train::AdamW& optimizer);

torch::Tensor cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);

// What every recipe's trainer_state.json holds: steps done, where the loader is, the clock, the fp16 loss scaler.
struct TrainerProgress {
  int64_t step = 0;                  // optimizer steps completed
  data::LoaderPosition loader;       // where the next batch comes from
  double elapsed_s = 0.0;            // training time before this checkpoint (for the resumed run's clock)
  double loss_scale = 0.0;           // fp16 dynamic loss scaler state (0: no scaler)
  int64_t loss_scale_clean_steps = 0;
  int64_t skipped_steps = 0;
};

// The common fields as JSON, for a recipe to add its own to and write.
nlohmann::json trainer_progress_json(const TrainerProgress& progress);
// Reads DIR/trainer_state.json: the common fields into `progress` (a missing or mistyped one is an InputError naming
// the file and the field); returns the object for the recipe's own fields.
nlohmann::json read_trainer_progress(const std::filesystem::path& dir, TrainerProgress& progress);

}  // namespace tune::recipes
