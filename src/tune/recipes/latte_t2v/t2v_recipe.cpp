// The latte_t2v recipe's registration: sampling (tune infer), tune prepare, training, export to a pipeline
// directory, and tune plan (training, and infer --grad).
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
  recipe.export_model = export_pipeline;
  recipe.plan = plan;
  recipe.plan_inference = plan_inference;
  return recipe;
}

}  // namespace tune::recipes::latte_t2v
