// The memory budget planner's vocabulary, shared by every recipe that can plan (`tune plan`, `tune train
// --memory-budget`): a candidate setting (checkpointing policy x micro-batch x accumulation x param_dtype x
// strategy), its predicted peak and relative step time, and the choice. Recipes fill a BudgetPlan (recipe.h's
// `plan`); plan_output prints it; plan_command applies it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tune/config/config.h"

namespace tune::recipes {

struct PlanRequest {
  config::Config config;
  uint64_t budget_bytes = 0;  // per process
  int processes = 1;          // data-parallel processes (distributed.strategy: ddp, shard_grad_op or full_shard)
};

// A checkpointing policy as the plans show it ("every_k (k=2)", "full") and the keys that select it
// (gradient_checkpointing=false, or =true with checkpointing.policy and checkpointing.k for every_k).
std::string checkpointing_label(const std::string& policy, int64_t k);
std::vector<std::string> checkpointing_overrides(const std::string& policy, int64_t k);

// One candidate: the keys the plan may change. The global batch (batch_size x accumulation x processes) is the
// recipe's; only how it is split changes.
struct PlanSetting {
  std::string checkpointing = "full";  // off | full | every_k | sqrt | selective
  int64_t k = 0;                       // every_k: checkpoint blocks 0, k, 2k, ...
  int64_t batch_size = 1;              // rows per micro-batch per process
  int64_t accumulation = 1;            // micro-batches per optimizer step
  std::string param_dtype = "fp32";    // fp32 | bf16 (frozen weights, LoRA only)
  int processes = 1;
  bool shard_grad_op = false;          // distributed.strategy shard_grad_op (optimizer state sharded)
  bool full_shard = false;             // distributed.strategy full_shard (parameters, gradients, state sharded)

  std::string strategy() const {
    if (processes <= 1) return "single";
    return full_shard ? "full_shard" : shard_grad_op ? "shard_grad_op" : "ddp";
  }
  // "every_k (k=2)" / "full"
  std::string checkpointing_label() const;
  // The key=value overrides that select this setting (applied after the user's own).
  std::vector<std::string> overrides() const;
};

// Where the predicted peak goes, per process.
struct PeakBreakdown {
  int64_t parameters = 0;       // live across steps
  int64_t optimizer_state = 0;  // live across steps
  int64_t gradients = 0;        // all of them, after backward (without accumulation, none before it)
  int64_t activations = 0;      // the activation estimate (saved tensors, weight copies, logits and loss at the head)
  int64_t other = 0;            // batch tensors, ddp gradient buckets
  // Forward and backward's peak above parameters and optimizer state: activations, the gradients that exist at
  // that moment, and `other`.
  int64_t step = 0;
  int64_t optimizer_step = 0;   // the update's temporaries, beside every gradient (activations are gone by then)
  // The larger of the two phases: forward/backward, and the optimizer update.
  int64_t peak() const;
};

struct PlanRow {
  PlanSetting setting;
  PeakBreakdown breakdown;
  int64_t peak_bytes = 0;
  double relative_time = 1.0;  // FLOP model: (forward + backward + recompute) / (forward + backward), see the recipe
  bool fits = false;
};

// What a changed recipe would need when nothing fits: the change (as overrides), and the best row it gives.
struct PlanAlternative {
  std::string description;             // "data.max_length 2048 -> 512"
  std::vector<std::string> overrides;  // to apply it
  PlanRow best;                        // the fastest row that fits with the change (or the smallest if none)
  bool fits = false;
  std::string note;                    // a caveat ("LoRA needs a pretrained model.path")
};

struct BudgetPlan {
  std::string recipe;
  std::string model;         // one line: layers, hidden, vocabulary, parameters, full / LoRA
  std::string precision;     // "bf16 autocast" / "fp32"
  std::string device;        // "cpu" / "cuda"
  uint64_t budget_bytes = 0;
  int processes = 1;
  int64_t global_batch = 1;  // rows (or batch_unit) per optimizer step over all processes
  std::string batch_unit = "rows";  // what training.batch_size counts: rows, or preference pairs (dpo)
  int64_t sequence = 0;      // tokens per row
  std::string time_model;    // how relative_time is computed, one sentence
  std::vector<PlanRow> rows;               // every candidate, fitting or not, in ranked order (fastest first)
  std::optional<size_t> chosen;            // index into rows: the fastest that fits
  std::vector<PlanAlternative> alternatives;  // filled when nothing fits

  const PlanRow* chosen_row() const { return chosen ? &rows[*chosen] : nullptr; }
  // The row with the smallest predicted peak (what comes closest when nothing fits).
  const PlanRow& smallest_row() const;
};

// Sorts rows fastest first (relative time; ties: the larger micro-batch, whose fewer and larger kernels are never
// slower; then `preferred_param_dtype`, the recipe's own; then the smaller peak), marks which fit `budget`, and
// sets `chosen` to the first that fits.
void rank_and_choose(BudgetPlan& plan, const std::string& preferred_param_dtype);

}  // namespace tune::recipes
