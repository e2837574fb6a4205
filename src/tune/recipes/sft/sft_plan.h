// `tune plan` for the SFT recipe: every checkpointing policy x micro-batch split x param_dtype (LoRA) for the
// recipe's model and global batch, each with its predicted peak (peak_prediction.h) and relative step time
// (step_flops.h), the fastest that fits chosen; when none fits, what would (a shorter data.max_length, LoRA,
// bf16 autocast), each computed by predicting again with the change.
#pragma once

#include <vector>

#include "tune/recipes/plan/budget_plan.h"
#include "tune/recipes/sft/peak_prediction.h"

namespace tune::recipes::sft {

BudgetPlan plan(const PlanRequest& request);

// The same planner for a recipe built on SFT's model and step (dpo): `pairs` says how its batches differ.
BudgetPlan plan_llama(const PlanRequest& request, const SftPlanInputs::Pairs& pairs, const std::string& recipe_name);

// The candidate settings for a recipe whose global batch is `rows_per_process` x `processes` rows per optimizer
// step: every micro-batch dividing rows_per_process (accumulation making up the rest) x off, selective,
// every_k (k = 2, 4, 8 below the layer count, and `recipe_k`), sqrt, full x fp32 (and bf16 with LoRA under
// autocast).
std::vector<PlanSetting> candidate_settings(const SftPlanInputs& inputs, int64_t rows_per_process, int processes,
                                            int64_t recipe_k);

// Predicts every candidate, ranks them and chooses (budget_plan.h): the plan without its alternatives.
BudgetPlan plan_for(const SftPlanInputs& inputs, const std::vector<PlanSetting>& candidates, uint64_t budget_bytes,
                    const std::string& preferred_param_dtype);

}  // namespace tune::recipes::sft
