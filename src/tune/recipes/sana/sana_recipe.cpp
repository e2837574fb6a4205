// The sana recipe's registration: sampling (tune infer). Training, tune prepare and export are not built yet
// (docs/status.md).
#include "tune/recipes/sana/sana_recipe.h"
#include "tune/recipes/sana/sana_settings.h"

namespace tune::recipes::sana {

Recipe make_recipe() {
  Recipe recipe;
  recipe.name = "sana";
  recipe.description = "Sana text-to-image (a diffusers SanaPipeline directory): sampling from prompts";
  recipe.schema = sana_schema;
  recipe.infer = infer;
  recipe.validate = validate_sana_config;
  return recipe;
}

}  // namespace tune::recipes::sana
