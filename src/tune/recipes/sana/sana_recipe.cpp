// The sana recipe's registration: sampling (tune infer), tune prepare, training, export and tune plan.
#include "tune/recipes/sana/sana_recipe.h"
#include "tune/recipes/sana/sana_settings.h"

namespace tune::recipes::sana {

Recipe make_recipe() {
  Recipe recipe;
  recipe.name = "sana";
  recipe.description = "Sana text-to-image (a diffusers SanaPipeline directory): sampling from prompts; full or LoRA fine-tuning on captioned images";
  recipe.schema = sana_schema;
  recipe.infer = infer;
  recipe.prepare = prepare;
  recipe.train = train;
  recipe.export_model = export_pipeline;
  recipe.plan = plan;
  recipe.validate = validate_sana_config;
  return recipe;
}

}  // namespace tune::recipes::sana
