// Preference tuning (DPO, IPO, SLiC hinge, robust DPO, SimPO, ORPO) of Llama-family LLMs, full or LoRA/QLoRA: the
// recipe's entry points. Inference, chat and export of a DPO run are the SFT recipe's (the same model and files).
#pragma once

#include "tune/recipes/recipe.h"

namespace tune::recipes::dpo {

Recipe make_recipe();
int train(const TrainRequest& request);
BudgetPlan plan(const PlanRequest& request);  // tune plan, --memory-budget (dpo_plan.cpp)

}  // namespace tune::recipes::dpo
