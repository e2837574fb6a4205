// The step loop every recipe runs: progress, metrics.jsonl, loss.svg, evaluation and checkpoint cadence, Ctrl-C,
// the non-finite-loss policy and the measured memory report. A recipe supplies what one optimizer step, one
// evaluation and one checkpoint mean; the loop owns when they happen.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tune::recipes {

struct StepLoopSettings {
  std::filesystem::path output_dir;
  int64_t total_steps = 1;
  int64_t log_every = 10;
  int64_t eval_every = 0;   // 0: only at the end
  int64_t save_every = 0;   // 0: only at the end
  int64_t keep_last = 2;
  std::string on_nan = "stop";               // "stop" | "skip"
  std::string throughput_unit = "tokens";    // metrics key <unit>_per_s; "tokens" or "samples"
  bool cuda = false;                         // which allocator's peak to read
  bool tensorboard = true;                   // also RUN/tensorboard/ event files (rank 0)
  // A recipe figure (StepResult::metrics, and its eval_ form) loss.svg draws on a right-hand axis: DPO's reward
  // margin. Empty: the loss alone.
  std::string plot_metric;
  std::string plot_metric_label;
};

struct TrainingSettings;
// The loop's cadence and policies as the shared training keys set them.
StepLoopSettings make_step_loop_settings(const TrainingSettings& training, const std::filesystem::path& output_dir,
                                         const std::string& throughput_unit, bool cuda);

struct StepResult {
  double loss = 0.0;
  double items = 0.0;                  // tokens or samples processed by the step
  bool applied = true;                 // false: the update was skipped
  double grad_norm = 0.0;
  double lr = 0.0;
  std::optional<double> loss_scale;    // fp16: the scale this step used
  std::optional<double> next_loss_scale;
  // Live tensor bytes once the step's gradients are reduced, before the update (tracking allocator, or CUDA's):
  // parameters, gradients, optimizer state, EMA, buffers and data, activations gone. memory.json reports the least
  // over steps (resident_bytes, and per rank): what a sharding strategy divides. The least, because a buffer of a
  // finished collective can still be held for a moment by Gloo's worker thread (seen: a whole gradient bucket on
  // one rank in the first step); the peak counts such moments. -1: not measured.
  int64_t resident_bytes = -1;
  // A peak the allocator's counters did not see (a CUDA graph replay allocates nothing: its working set is what the
  // capture allocated); the loop takes the larger of it and the measured one. -1: none.
  int64_t unseen_peak_bytes = -1;
  // A recipe's own figures for metrics.jsonl (and TensorBoard), under their names (DPO: TRL's "rewards/chosen", ...),
  // and a short note for the progress line ("reward acc 0.75").
  std::vector<std::pair<std::string, double>> metrics;
  std::string progress_note;
};

struct StepLoopHooks {
  std::function<StepResult(int64_t step)> step;                      // optimizer step `step` (0-based)
  std::function<std::optional<double>()> evaluate;                   // mean eval loss, nullopt: no eval set
  // Optional: more evaluation figures, called right after `evaluate` returned a loss; written as "eval_" + name.
  std::function<std::vector<std::pair<std::string, double>>()> evaluate_metrics;
  std::function<void(const std::filesystem::path& dir, int64_t step, double elapsed_s)> save;  // rank 0
  // Set when each rank holds a share of the optimizer state (shard_grad_op): at every checkpoint, called on every
  // rank to write its share to `file`, with `metadata` (optimizer_shard_metadata: rank, world size, step) in its
  // header; the loop puts the files into the checkpoint (checkpoint_files.h's optimizer_shard_file names) before
  // rank 0 marks it COMPLETE, and `save` writes no optimizer state.
  std::function<void(const std::filesystem::path& file, const std::map<std::string, std::string>& metadata)>
      save_optimizer_shard;
  // Optional, on every rank around each checkpoint: before_save may be collective (full_shard gathers the
  // parameters); after_save (local, also when saving failed) releases what it gathered.
  std::function<void()> before_save;
  std::function<void()> after_save;
};

struct LoopStart {
  int64_t step = 0;           // steps already done (resume)
  double elapsed_s = 0.0;     // training time before this process
};

// `memory_plan`: the recipe's announced figures (bytes); written to output_dir/memory.json at start and again at
// the end with the measured peak ("peak_bytes"). Returns the process exit code (0, or 130 after Ctrl-C).
int run_step_loop(const StepLoopSettings& settings, const StepLoopHooks& hooks, LoopStart start,
                  nlohmann::json memory_plan);

}  // namespace tune::recipes
