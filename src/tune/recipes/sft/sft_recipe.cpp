// The SFT recipe's registration entry: its schema and command implementations.
#include "tune/recipes/sft/sft_recipe.h"

#include "tune/recipes/sft/sft_plan.h"
#include "tune/recipes/sft/sft_settings.h"

namespace tune::recipes::sft {

Recipe make_recipe() {
  Recipe recipe;
  recipe.name = "sft";
  recipe.description = "supervised fine-tuning of Llama-family LLMs (full or LoRA)";
  recipe.schema = sft_schema;
  recipe.train = train;
  recipe.infer = infer;
  recipe.chat = chat;
  recipe.export_model = export_model;
  recipe.plan = plan;
  recipe.validate = validate_sft_config;
  return recipe;
}

}  // namespace tune::recipes::sft
