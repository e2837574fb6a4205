#include "tune/recipes/latte_t2v/t2v_pipeline.h"

#include "tune/recipes/diffusion/pipeline_components.h"

namespace tune::recipes::latte_t2v {

ComponentPaths resolve_components(const PipelineSettings& settings) {
  auto paths = diffusion_common::resolve_pipeline_components(
      settings.path,
      {{"transformer", {"LatteTransformer3DModel", "LatteT2V"}, settings.transformer},
       {"vae", {"AutoencoderKL"}, settings.vae},
       {"text_encoder", {"T5EncoderModel"}, settings.text_encoder},
       {"tokenizer", {"T5Tokenizer", "T5TokenizerFast"}, settings.tokenizer},
       {"scheduler", {"DDIMScheduler", "DPMSolverMultistepScheduler"}, settings.scheduler}},
      "Latte");
  return {paths.at("transformer"), paths.at("vae"), paths.at("text_encoder"), paths.at("tokenizer"),
          paths.at("scheduler")};
}

torch::ScalarType text_encoder_dtype(const std::string& setting, precision::MixedPrecision mixed) {
  if (setting == "fp32") return torch::kFloat32;
  if (setting == "bf16") return torch::kBFloat16;
  return mixed == precision::MixedPrecision::no ? torch::kFloat32 : torch::kBFloat16;
}

}  // namespace tune::recipes::latte_t2v
