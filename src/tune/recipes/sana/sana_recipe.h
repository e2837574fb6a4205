// The sana recipe (NVlabs' Sana as diffusers publishes it: SanaPipeline directories): sampling from prompts.
#pragma once

#include "tune/recipes/recipe.h"

namespace tune::recipes::sana {

Recipe make_recipe();
int infer(const InferRequest& request);

}  // namespace tune::recipes::sana
