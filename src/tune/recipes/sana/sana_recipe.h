// The sana recipe (NVlabs' Sana as diffusers publishes it: SanaPipeline directories): sampling from prompts, and
// fine-tuning the transformer (full or LoRA) on captioned images that tune prepare turned into latents.
#pragma once

#include "tune/recipes/plan/budget_plan.h"
#include "tune/recipes/recipe.h"

namespace tune::recipes::sana {

Recipe make_recipe();
int infer(const InferRequest& request);
int prepare(const PrepareRequest& request);
int train(const TrainRequest& request);
int export_pipeline(const ExportRequest& request);
BudgetPlan plan(const PlanRequest& request);

}  // namespace tune::recipes::sana
