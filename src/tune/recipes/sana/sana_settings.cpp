#include "tune/recipes/sana/sana_settings.h"

#include "tune/models/sana.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/diffusion/lora_settings.h"

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
  schema.boolean("sampling.resolution_binning", true,
                 "tune infer: generate at the nearest size of the model's aspect-ratio table (SanaPipeline's "
                 "use_resolution_binning; transformers of sample_size 16, 32, 64, 128), then scale and crop to the "
                 "size asked");
  schema.boolean("sampling.complex_human_instruction", true,
                 "tune infer: prepend SanaPipeline's complex human instruction to each prompt (its default)");
  diffusion_common::add_guidance_keys(schema);

  schema.path("data.path", "captioned images: a JSONL of {\"image\": PATH, \"caption\": TEXT} rows, or a folder of "
                           "images each with a same-named .txt caption");
  schema.path("data.latents", "tune prepare's output (DC-AE latents and Gemma 2 caption embeddings); training reads it");
  schema.integer("data.image_size", 1024,
                 "training size in pixels: the square (short side resized, then center-cropped), or with "
                 "data.aspect_ratio_buckets the resolution of the bucket table (ASPECT_RATIO_<size>)");
  schema.boolean("data.aspect_ratio_buckets", false,
                 "multi-scale training as the official trainer's model.multi_scale: each image resized (bicubic) and "
                 "center-cropped to the bucket of data.image_size's aspect-ratio table nearest its shape, each batch "
                 "from one bucket; tune prepare encodes the latents at those sizes");
  schema.real("data.caption_dropout", 0.1, "probability an image trains on the empty prompt (for classifier-free guidance)");
  schema.choice("data.on_bad_image", {"fail", "skip"}, "fail",
                "an image that is missing, unreadable or without a caption: stop naming it, or skip it (logged)");
  schema.boolean("data.complex_human_instruction", true,
                 "tune prepare: encode captions with the complex human instruction, as the official trainer and "
                 "SanaPipeline's sampling do");
  diffusion_common::add_lora_keys(schema, {"to_q", "to_k", "to_v"},
                                  "projections to adapt (attn1 and attn2): to_q, to_k, to_v, to_out.0 (diffusers' "
                                  "train_dreambooth_lora_sana.py default: to_q, to_k, to_v)");
  schema.real("flow.shift", 3.0, "sigma' = s sigma / (1 + (s - 1) sigma) of the training sigmas (Sana's flow_shift)");
  schema.choice("flow.weighting", {"logit_normal", "uniform", "mode"}, "logit_normal",
                "how training timesteps are drawn (diffusers' weighting_scheme; the loss is unweighted)");
  schema.real("flow.logit_mean", 0.0, "logit_normal: the normal's mean");
  schema.real("flow.logit_std", 1.0, "logit_normal: the normal's standard deviation");
  schema.real("ema.decay", 0.9999,
              "EMA of the weights, used for sampling; 0 = none kept (the trained weights: no fp32 copy in memory)");
  schema.integer("training.clip_start_step", 0, "clip gradients only from this step on");
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
  sampling.resolution_binning = config.get_bool("sampling.resolution_binning");
  settings.guidance = diffusion_common::read_guidance_settings(config, 1, "the image (one frame)");

  auto& data = settings.data;
  if (config.has("data.path")) data.path = config.get_string("data.path");
  if (config.has("data.latents")) data.latents = config.get_string("data.latents");
  data.image_size = get_int_at_least(config, "data.image_size", 1);
  data.aspect_ratio_buckets = config.get_bool("data.aspect_ratio_buckets");
  data.caption_dropout = config.get_real("data.caption_dropout");
  if (data.caption_dropout < 0 || data.caption_dropout >= 1) config.fail("data.caption_dropout", "must be in [0, 1)");
  data.skip_bad_images = config.get_string("data.on_bad_image") == "skip";
  data.complex_human_instruction = config.get_bool("data.complex_human_instruction");
  settings.lora = diffusion_common::read_lora_settings(config, models::sana_lora_targets());
  auto& flow = settings.flow;
  flow.flow_shift = config.get_real("flow.shift");
  if (flow.flow_shift <= 0) config.fail("flow.shift", "must be > 0");
  flow.density = diffusion::parse_timestep_density(config.get_string("flow.weighting"));
  flow.logit_mean = config.get_real("flow.logit_mean");
  flow.logit_std = config.get_real("flow.logit_std");
  if (flow.logit_std <= 0) config.fail("flow.logit_std", "must be > 0");
  settings.ema_decay = config.get_real("ema.decay");
  if (settings.ema_decay < 0 || settings.ema_decay >= 1) config.fail("ema.decay", "must be in [0, 1)");
  settings.clip_start_step = get_int_at_least(config, "training.clip_start_step", 0);
  return settings;
}

void validate_sana_config(const config::Config& config) {
  (void)read_run_settings(config);
  (void)read_training_settings(config);
  (void)read_distributed_settings(config);
  diffusion_common::check_training_param_dtype(config, read_sana_settings(config).lora);
  // The official code's name for the block (its FSDP wrap class) is accepted beside diffusers'.
  validate_shard_blocks(config, {models::SanaImpl::block_type(), "SanaMSBlock"});
}

}  // namespace tune::recipes::sana
