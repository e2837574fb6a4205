#include "tune/recipes/dpo/dpo_recipe.h"

#include "tune/recipes/dpo/dpo_settings.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes::dpo {

Recipe make_recipe() {
  Recipe recipe;
  recipe.name = "dpo";
  recipe.description = "preference tuning of Llama-family LLMs (DPO and its cousins; full or LoRA/QLoRA)";
  recipe.schema = dpo_schema;
  recipe.train = train;
  recipe.infer = sft::infer;
  recipe.chat = sft::chat;
  recipe.export_model = sft::export_model;
  recipe.plan = plan;
  recipe.validate = validate_dpo_config;
  return recipe;
}

}  // namespace tune::recipes::dpo
