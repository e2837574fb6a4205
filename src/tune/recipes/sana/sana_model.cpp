#include "tune/recipes/sana/sana_model.h"

#include "tune/recipes/diffusion/diffusers_transformer.h"
#include "tune/recipes/diffusion/pipeline_components.h"

namespace tune::recipes::sana {

SanaComponents resolve_sana_components(const SanaPipelineSettings& model) {
  const auto paths = diffusion_common::resolve_pipeline_components(
      model.path,
      {{"transformer", {"SanaTransformer2DModel"}, model.transformer},
       {"vae", {"AutoencoderDC"}, model.vae},
       {"text_encoder", {"Gemma2Model", "Gemma2ForCausalLM"}, model.text_encoder},
       {"tokenizer", {"GemmaTokenizer", "GemmaTokenizerFast"}, model.tokenizer},
       {"scheduler", {"DPMSolverMultistepScheduler", "FlowMatchEulerDiscreteScheduler"}, model.scheduler}},
      "Sana");
  return {paths.at("transformer"), paths.at("vae"), paths.at("text_encoder"), paths.at("tokenizer"),
          paths.at("scheduler")};
}

torch::ScalarType text_encoder_dtype(const std::string& setting, precision::MixedPrecision mixed) {
  if (setting == "fp32") return torch::kFloat32;
  if (setting == "bf16") return torch::kBFloat16;
  return mixed == precision::MixedPrecision::no ? torch::kFloat32 : torch::kBFloat16;
}

models::Sana load_sana_transformer(const std::filesystem::path& config_file, const std::filesystem::path& transformer_dir,
                                   const models::SanaLora& lora, const std::optional<std::filesystem::path>& checkpoint) {
  models::Sana model(models::read_sana_config(config_file), lora);
  diffusion_common::load_diffusers_transformer(*model, model->has_lora(), transformer_dir, checkpoint);
  return model;
}

}  // namespace tune::recipes::sana
