// The Latte recipe's registration: its schema and commands.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/recipes/latte/latte_recipe.h"
#include "tune/recipes/latte/latte_settings.h"

namespace tune::recipes::latte {

Recipe make_recipe() {
  Recipe recipe;
  recipe.name = "latte";
  recipe.description = "Latte video generation: a spatio-temporal diffusion transformer";
  recipe.schema = latte_schema;
  recipe.train = train;
  recipe.infer = infer;
  recipe.prepare = prepare;
  recipe.plan = plan;
  recipe.plan_inference = plan_inference;
  recipe.validate = validate_latte_config;
  recipe.export_model = [](const ExportRequest& request) -> int {
    throw UsageError(fmt::format("{}: a Latte checkpoint is already in the exported format (model.safetensors, "
                                 "ema.safetensors, latte_config.json); copy the directory", request.checkpoint.string()));
  };
  return recipe;
}

}  // namespace tune::recipes::latte
