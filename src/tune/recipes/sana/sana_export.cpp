// `tune export` for Sana: a checkpoint -> a diffusers directory that SanaPipeline.from_pretrained loads
// (recipes/diffusion/pipeline_export.h). A LoRA checkpoint is also, as it is, a PEFT adapter and a diffusers LoRA
// file (SanaPipeline.load_lora_weights(CHECKPOINT)).
#include "tune/diffusion/scheduler_config.h"
#include "tune/recipes/diffusion/diffusers_transformer.h"
#include "tune/recipes/diffusion/pipeline_export.h"
#include "tune/recipes/sana/sana_model.h"
#include "tune/recipes/sana/sana_recipe.h"

namespace tune::recipes::sana {

int export_pipeline(const ExportRequest& request) {
  const SanaSettings settings = read_sana_settings(request.config);
  const SanaComponents paths = resolve_sana_components(settings.model);
  diffusion_common::PipelineExportSpec spec;
  spec.recipe = "sana";
  spec.pipeline_class = "SanaPipeline";
  spec.pipeline_path = settings.model.path;
  if (!spec.pipeline_path) {  // the classes the components were checked to have
    const auto scheduler = diffusion::read_scheduler_config(paths.scheduler / "scheduler_config.json");
    spec.fallback_index = {{"_class_name", "SanaPipeline"},
                           {"transformer", nlohmann::json::array({"diffusers", "SanaTransformer2DModel"})},
                           {"vae", nlohmann::json::array({"diffusers", "AutoencoderDC"})},
                           {"text_encoder", nlohmann::json::array({"transformers", "Gemma2Model"})},
                           {"tokenizer", nlohmann::json::array({"transformers", "GemmaTokenizerFast"})},
                           {"scheduler", nlohmann::json::array({"diffusers", scheduler.class_name})}};
  }
  spec.components = {{"vae", paths.vae}, {"text_encoder", paths.text_encoder}, {"tokenizer", paths.tokenizer},
                     {"scheduler", paths.scheduler}};
  spec.lora = settings.lora.options.rank > 0;
  spec.merged_transformer = [&] {
    const auto model = load_sana_transformer(request.checkpoint / "config.json", paths.transformer, settings.lora,
                                             request.checkpoint);
    return diffusion_common::merged_state(*model);
  };
  return diffusion_common::export_diffusers_pipeline(request, spec);
}

}  // namespace tune::recipes::sana
