// Supervised fine-tuning of Llama-family LLMs (full or LoRA): the recipe's entry points.
#pragma once

#include "tune/recipes/recipe.h"

namespace tune::recipes::sft {

Recipe make_recipe();

int train(const TrainRequest& request);
int infer(const InferRequest& request);
int chat(const InferRequest& request);
int export_model(const ExportRequest& request);

}  // namespace tune::recipes::sft
