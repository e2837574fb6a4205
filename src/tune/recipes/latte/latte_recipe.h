// Latte video generation (a spatio-temporal diffusion transformer): the recipe's entry points.
#pragma once

#include "tune/recipes/plan/budget_plan.h"
#include "tune/recipes/plan/inference_plan.h"
#include "tune/recipes/recipe.h"

namespace tune::recipes::latte {

Recipe make_recipe();
int train(const TrainRequest& request);
int infer(const InferRequest& request);
int prepare(const PrepareRequest& request);  // VAE latents of every video, for training without the VAE
BudgetPlan plan(const PlanRequest& request);                     // tune plan: training
InferencePlan plan_inference(const InferencePlanRequest& request);  // tune plan --infer: infer --grad

}  // namespace tune::recipes::latte
