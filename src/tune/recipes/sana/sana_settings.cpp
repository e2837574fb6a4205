#include "tune/recipes/sana/sana_settings.h"

#include "tune/models/sana.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"

namespace tune::recipes::sana {

config::Schema sana_schema() {
  config::Schema schema = common_schema("sana");
  schema.path("model.path", "a diffusers Sana pipeline directory (model_index.json), e.g. Sana_1600M_1024px_diffusers");
  schema.path("model.transformer", "SanaTransformer2DModel directory replacing the pipeline's transformer/");
  schema.path("model.vae", "AutoencoderDC directory replacing the pipeline's vae/");
  schema.path("model.text_encoder", "Gemma2Model directory replacing the pipeline's text_encoder/");
  schema.path("model.tokenizer", "Gemma tokenizer directory (tokenizer.json) replacing the pipeline's tokenizer/");
  schema.path("model.scheduler", "scheduler directory (scheduler_config.json) replacing the pipeline's scheduler/");
  schema.choice("model.text_encoder_dtype", {"auto", "bf16", "fp32"}, "auto",
                "Gemma 2 weights and compute; auto = bf16 under mixed_precision bf16/fp16, fp32 with no");
  schema.boolean("model.vae_tiling", false,
                 "decode in 512-pixel tiles with 64 pixels of blending (AutoencoderDC.enable_tiling), for large images");

  schema.integer("sampling.steps", 20, "tune infer: denoising steps");
  schema.real("sampling.cfg_scale", 4.5, "tune infer: classifier-free guidance scale; 1 = off");
  schema.integer("sampling.height", 1024, "tune infer: height in pixels (a multiple of the VAE's factor x patch size)");
  schema.integer("sampling.width", 1024, "tune infer: width in pixels");
  schema.string("sampling.negative_prompt", "", "tune infer: the unconditional prompt of classifier-free guidance");
  schema.integer("sampling.max_text_tokens", 300,
                 "caption tokens the transformer sees (SanaPipeline's max_sequence_length)");
  schema.boolean("sampling.complex_human_instruction", true,
                 "tune infer: prepend SanaPipeline's complex human instruction to each prompt (its default)");
  diffusion_common::add_guidance_keys(schema);
  return schema;
}

SanaSettings read_sana_settings(const config::Config& config) {
  SanaSettings settings;
  auto& model = settings.model;
  static_cast<diffusion_common::PipelinePaths&>(model) = diffusion_common::read_pipeline_paths(config);
  model.text_encoder_dtype = config.get_string("model.text_encoder_dtype");
  model.vae_tiling = config.get_bool("model.vae_tiling");

  auto& sampling = settings.sampling;
  sampling.steps = get_int_at_least(config, "sampling.steps", 1);
  sampling.cfg_scale = config.get_real("sampling.cfg_scale");
  if (sampling.cfg_scale < 0) config.fail("sampling.cfg_scale", "must be >= 0");
  sampling.height = get_int_at_least(config, "sampling.height", 1);
  sampling.width = get_int_at_least(config, "sampling.width", 1);
  sampling.negative_prompt = config.get_string("sampling.negative_prompt");
  sampling.max_text_tokens = get_int_at_least(config, "sampling.max_text_tokens", 2);
  sampling.complex_human_instruction = config.get_bool("sampling.complex_human_instruction");
  settings.guidance = diffusion_common::read_guidance_settings(config, 1, "the image (one frame)");
  return settings;
}

void validate_sana_config(const config::Config& config) {
  (void)read_run_settings(config);
  (void)read_training_settings(config);
  (void)read_distributed_settings(config);
  (void)read_sana_settings(config);
  // The official code's name for the block (its FSDP wrap class) is accepted beside diffusers'.
  validate_shard_blocks(config, {models::SanaImpl::block_type(), "SanaMSBlock"});
}

}  // namespace tune::recipes::sana
