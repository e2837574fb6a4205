// `tune plan` for the diffusion recipes' training (and `tune train --memory-budget`), shared by every denoiser
// family: every checkpointing policy x micro-batch split of the recipe's rows per process, with the peak per process
// that the shared training loop's own memory plan prints (diffusion_train.cpp: parameters, gradients, AdamW's
// moments and the EMA copy, divided as the data-parallel strategy divides them, plus the family's activation
// estimate of the micro-batch, which the family's unit and CLI tests hold to the measured peak). A family brings
// its parameter counts and its estimate; the candidates, the accounting and the time model are the same for all.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tune/memory/checkpoint.h"
#include "tune/recipes/activation_estimate.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/plan/budget_plan.h"

namespace tune::recipes::diffusion_common {

struct DenoiserParameterCounts {
  int64_t total = 0;
  int64_t trainable = 0;       // every parameter (full fine-tuning) or the adapters (LoRA)
  int64_t largest_block = 0;   // the largest checkpointed block (what full_shard gathers at a time)
  int64_t outside_blocks = 0;  // the rest of the model (embeddings, conditioning, output layer)
};

// A denoiser's parameters counted on a small instance of it (its own constructors decide the shapes, so the count is
// exact without the real model's weights): `instance` holds `instance_blocks` blocks of each kind, named
// `PREFIX.N.` for each of `block_prefixes` ("transformer_blocks", "temporal_transformer_blocks"), all alike, and the
// real model has `blocks_per_prefix` of each kind. A parameter trains when `lora` is false or its name holds "lora_".
DenoiserParameterCounts count_denoiser_parameters(const torch::nn::Module& instance,
                                                  const std::vector<std::string>& block_prefixes,
                                                  int64_t instance_blocks, int64_t blocks_per_prefix, bool lora);

struct DenoiserPlanInputs {
  DenoiserParameterCounts parameters;
  int64_t blocks = 0;  // the blocks the checkpointing runner sees, in execution order
  // The activation estimate of a micro-batch of `batch` rows under the runner's policy, in its two phases (the
  // parameter gradients are added to the backward phase alone).
  std::function<StackPhases(int64_t batch, const memory::CheckpointRunner& runner)> activations;
};

// Every candidate for the recipe's training settings and strategy (the rows, ranked and the choice made for
// request.budget_bytes; processes, global batch, precision, device and time model set); the recipe fills in what
// describes it (recipe, model, sequence).
BudgetPlan plan_denoiser_training(const config::Config& config, const PlanRequest& request,
                                  const DenoiserPlanInputs& inputs);

// The checkpointing policies a denoiser plan tries (every_k with the recipe's k, at least 2, when it leaves some
// of the `blocks` plain), the runner of one, and its step time relative to policy off by the time model below.
std::vector<PlanSetting> checkpointing_candidates(const RunSettings& run, int64_t blocks);
memory::CheckpointRunner runner_for(const PlanSetting& setting, int64_t blocks);
double relative_step_time(const memory::CheckpointRunner& runner, int64_t blocks);

// The time model every denoiser plan states (BudgetPlan::time_model).
extern const char* const kDenoiserTimeModel;

}  // namespace tune::recipes::diffusion_common
