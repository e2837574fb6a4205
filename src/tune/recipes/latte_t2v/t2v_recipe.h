// Text-to-video Latte (Latte-1, diffusers' LattePipeline layout): the recipe's entry points.
#pragma once

#include "tune/recipes/recipe.h"

namespace tune::recipes::latte_t2v {

Recipe make_recipe();
int infer(const InferRequest& request);

}  // namespace tune::recipes::latte_t2v
