// `tune plan` for the DPO recipe: SFT's planner (recipes/sft/sft_plan.h) with the pairs' shape: two rows per pair,
// the chunked per-sequence log-probs at the head, the reference's weights (a full fine-tune's frozen copy) and
// forward time.
#include "tune/recipes/dpo/dpo_recipe.h"
#include "tune/recipes/dpo/dpo_settings.h"
#include "tune/recipes/sft/sft_plan.h"

namespace tune::recipes::dpo {

BudgetPlan plan(const PlanRequest& request) {
  validate_dpo_config(request.config);
  const DpoSettings settings = read_dpo_settings(request.config);
  sft::SftPlanInputs::Pairs pairs;
  pairs.enabled = true;
  pairs.reference_forward = settings.uses_reference() && !settings.precompute_reference;
  if (pairs.reference_forward && !settings.reference_is_base()) {
    pairs.reference_copy_bytes_per_parameter = settings.reference_bf16 ? 2 : 4;
  }
  return sft::plan_llama(request, pairs, "dpo");
}

}  // namespace tune::recipes::dpo
