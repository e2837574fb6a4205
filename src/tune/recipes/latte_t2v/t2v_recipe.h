// Text-to-video Latte (Latte-1, diffusers' LattePipeline layout): the recipe's entry points.
#pragma once

#include "tune/recipes/recipe.h"

namespace tune::recipes::latte_t2v {

Recipe make_recipe();
int infer(const InferRequest& request);
int train(const TrainRequest& request);
int prepare(const PrepareRequest& request);
int export_pipeline(const ExportRequest& request);  // a diffusers pipeline directory with the trained transformer  // VAE latents and T5 caption embeddings, for training without either

}  // namespace tune::recipes::latte_t2v
