// Text-to-video Latte (Latte-1, diffusers' LattePipeline layout): the recipe's entry points.
#pragma once

#include "tune/recipes/plan/budget_plan.h"
#include "tune/recipes/plan/inference_plan.h"
#include "tune/recipes/recipe.h"

namespace tune::recipes::latte_t2v {

Recipe make_recipe();
int infer(const InferRequest& request);
int train(const TrainRequest& request);
int prepare(const PrepareRequest& request);  // VAE latents and T5 caption embeddings, for training without either
int export_pipeline(const ExportRequest& request);  // a diffusers pipeline directory with the trained transformer
BudgetPlan plan(const PlanRequest& request);                     // tune plan: training
InferencePlan plan_inference(const InferencePlanRequest& request);  // tune plan --infer: infer --grad

}  // namespace tune::recipes::latte_t2v
