// The latte_t2v recipe's registration. Sampling (tune infer) works; training a text-to-video Latte is not built
// yet and says so.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"
#include "tune/recipes/latte_t2v/t2v_settings.h"

namespace tune::recipes::latte_t2v {

Recipe make_recipe() {
  Recipe recipe;
  recipe.name = "latte_t2v";
  recipe.description = "text-to-video Latte (Latte-1, a diffusers LattePipeline directory): sampling from prompts";
  recipe.schema = t2v_schema;
  recipe.infer = infer;
  recipe.validate = validate_t2v_config;
  recipe.train = [](const TrainRequest&) -> int {
    throw UsageError("recipe latte_t2v: text-to-video training is not implemented yet (tune infer samples from a "
                     "Latte-1 pipeline); the class-conditional recipe `latte` trains");
  };
  recipe.export_model = [](const ExportRequest& request) -> int {
    throw UsageError(fmt::format("{}: recipe latte_t2v has nothing to export yet (no training)",
                                 request.checkpoint.string()));
  };
  return recipe;
}

}  // namespace tune::recipes::latte_t2v
