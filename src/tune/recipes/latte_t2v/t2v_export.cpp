// `tune export` for text-to-video Latte: a checkpoint -> a diffusers directory that LattePipeline.from_pretrained
// loads (recipes/diffusion/pipeline_export.h); a LoRA checkpoint is also a PEFT adapter as it is.
#include "tune/diffusion/scheduler_config.h"
#include "tune/recipes/diffusion/diffusers_transformer.h"
#include "tune/recipes/diffusion/pipeline_export.h"
#include "tune/recipes/latte_t2v/t2v_model.h"
#include "tune/recipes/latte_t2v/t2v_pipeline.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"

namespace tune::recipes::latte_t2v {

int export_pipeline(const ExportRequest& request) {
  const T2VSettings settings = read_t2v_settings(request.config);
  const ComponentPaths paths = resolve_components(settings.model);
  diffusion_common::PipelineExportSpec spec;
  spec.recipe = "latte_t2v";
  spec.pipeline_class = "LattePipeline";
  spec.pipeline_path = settings.model.path;
  if (!spec.pipeline_path) {  // the classes the components were checked to have
    const auto scheduler = diffusion::read_scheduler_config(paths.scheduler / "scheduler_config.json");
    spec.fallback_index = {{"_class_name", "LattePipeline"},
                           {"transformer", nlohmann::json::array({"diffusers", "LatteTransformer3DModel"})},
                           {"vae", nlohmann::json::array({"diffusers", "AutoencoderKL"})},
                           {"text_encoder", nlohmann::json::array({"transformers", "T5EncoderModel"})},
                           {"tokenizer", nlohmann::json::array({"transformers", "T5Tokenizer"})},
                           {"scheduler", nlohmann::json::array({"diffusers", scheduler.class_name})}};
  }
  spec.components = {{"vae", paths.vae}, {"text_encoder", paths.text_encoder}, {"tokenizer", paths.tokenizer},
                     {"scheduler", paths.scheduler}};
  spec.lora = settings.lora.options.rank > 0;
  spec.merged_transformer = [&] {
    const auto model = load_transformer(request.checkpoint / "config.json", paths.transformer, settings.lora,
                                        request.checkpoint);
    return diffusion_common::merged_state(*model);
  };
  return diffusion_common::export_diffusers_pipeline(request, spec);
}

}  // namespace tune::recipes::latte_t2v
