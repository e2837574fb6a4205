// The latte_t2v recipe's registration: sampling (tune infer), tune prepare and training; export is not built yet
// and says so.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"
#include "tune/recipes/latte_t2v/t2v_settings.h"

namespace tune::recipes::latte_t2v {

Recipe make_recipe() {
  Recipe recipe;
  recipe.name = "latte_t2v";
  recipe.description = "text-to-video Latte (Latte-1, a diffusers LattePipeline directory): sampling from prompts, fine-tuning on captioned videos";
  recipe.schema = t2v_schema;
  recipe.infer = infer;
  recipe.validate = validate_t2v_config;
  recipe.train = train;
  recipe.prepare = prepare;
  recipe.export_model = [](const ExportRequest& request) -> int {
    throw UsageError(fmt::format("{}: recipe latte_t2v cannot export yet (a pipeline directory is planned); sample from the run with `tune infer RUN_DIR --prompt ...`",
                                 request.checkpoint.string()));
  };
  return recipe;
}

}  // namespace tune::recipes::latte_t2v
