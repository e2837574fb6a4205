#include "tune/recipes/latte_t2v/t2v_settings.h"

#include <fmt/format.h>

#include "tune/models/latte_t2v.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/diffusion/lora_settings.h"

namespace tune::recipes::latte_t2v {

config::Schema t2v_schema() {
  config::Schema schema = common_schema("latte_t2v");
  schema.path("model.path", "a diffusers Latte pipeline directory (model_index.json), e.g. maxin-cn/Latte-1");
  schema.path("model.transformer", "LatteTransformer3DModel directory replacing the pipeline's transformer/");
  schema.path("model.vae", "AutoencoderKL directory replacing the pipeline's vae/");
  schema.path("model.text_encoder", "T5EncoderModel directory replacing the pipeline's text_encoder/");
  schema.path("model.tokenizer", "T5 tokenizer directory (spiece.model) replacing the pipeline's tokenizer/");
  schema.path("model.scheduler", "scheduler directory (scheduler_config.json) replacing the pipeline's scheduler/");
  schema.choice("model.text_encoder_dtype", {"auto", "bf16", "fp32"}, "auto",
                "T5 weights and compute; auto = bf16 under mixed_precision bf16/fp16, fp32 with no (fp16 T5 overflows)");
  schema.integer("model.vae_chunk_frames", 14, "frames per VAE decode call (LattePipeline's decode_chunk_size)");

  diffusion_common::add_video_data_keys(
      schema, "captioned videos: a JSONL of {\"video\": PATH, \"caption\": TEXT} rows, or a folder of videos each "
              "with a same-named .txt caption", /*flip=*/false);
  schema.real("data.caption_dropout", 0.1, "probability a clip trains on the empty prompt (for classifier-free guidance)");
  schema.path("data.images", "captioned images joined to the video clips (data.use_image_num): a JSONL of "
                             "{\"image\": PATH, \"caption\": TEXT} rows, or a folder of images each with a "
                             "same-named .txt");
  schema.integer("data.use_image_num", 0,
                 "images from data.images joined to each training clip (the official use_image_num): they train the "
                 "spatial blocks with their own captions, the temporal blocks skip them");
  diffusion_common::add_lora_keys(schema, {"to_q", "to_k", "to_v", "to_out.0"},
                                  "projections to adapt (attn1 and attn2): to_q, to_k, to_v, to_out.0, ff.net.0.proj, "
                                  "ff.net.2");
  schema.real("ema.decay", 0.9999,
              "EMA of the weights, used for sampling; 0 = none kept (the trained weights: no fp32 copy in memory)");
  schema.integer("training.clip_start_step", 0, "clip gradients only from this step on");

  schema.integer("sampling.steps", 50, "tune infer: denoising steps");
  schema.real("sampling.cfg_scale", 7.5, "tune infer: classifier-free guidance scale; 1 = off");
  schema.real("sampling.eta", 0.0, "tune infer: DDIM eta");
  schema.integer("sampling.frames", 16, "tune infer: frames to sample (any count; 1 = an image)");
  schema.integer("sampling.height", 512, "tune infer: height in pixels (a multiple of VAE factor x patch size)");
  schema.integer("sampling.width", 512, "tune infer: width in pixels");
  schema.string("sampling.negative_prompt", "", "tune infer: the unconditional prompt of classifier-free guidance");
  schema.integer("sampling.max_text_tokens", 120,
                 "prompt tokens at most (LattePipeline: 120); tune prepare pads captions to it");
  schema.boolean("sampling.mask_feature", true,
                 "one prompt: cut the text embeddings to its real tokens; several: zero the padded rows (LattePipeline)");
  schema.boolean("sampling.caption_mask", false,
                 "pass the prompts' attention masks to the transformer's cross-attention, as training does "
                 "(LattePipeline passes none: the negative prompt's padded rows are attended)");
  schema.boolean("sampling.temporal_attention", true, "run the temporal blocks (off: frames sampled independently)");
  schema.integer("sampling.fps", 8, "tune infer: frame rate of the written video");
  diffusion_common::add_guidance_keys(schema);
  return schema;
}

T2VSettings read_t2v_settings(const config::Config& config) {
  T2VSettings settings;
  auto& model = settings.model;
  static_cast<diffusion_common::PipelinePaths&>(model) = diffusion_common::read_pipeline_paths(config);
  model.text_encoder_dtype = config.get_string("model.text_encoder_dtype");
  model.vae_chunk_frames = get_int_at_least(config, "model.vae_chunk_frames", 1);

  static_cast<diffusion_common::VideoDataSettings&>(settings.data) = diffusion_common::read_video_data_settings(config);
  settings.data.caption_dropout = config.get_real("data.caption_dropout");
  if (settings.data.caption_dropout < 0 || settings.data.caption_dropout >= 1) {
    config.fail("data.caption_dropout", "must be in [0, 1)");
  }
  if (config.has("data.images")) settings.data.images = config.get_string("data.images");
  settings.data.use_image_num = get_int_at_least(config, "data.use_image_num", 0);
  if (settings.data.use_image_num > 0 && !settings.data.images) {
    config.fail("data.use_image_num", fmt::format("is {}, but data.images is not set: name the captioned images to "
                                                  "join to each clip", settings.data.use_image_num));
  }
  if (settings.data.images && settings.data.use_image_num == 0) {
    config.fail("data.images", "is set, but data.use_image_num is 0, so no image would be used: set how many images "
                               "to join to each clip");
  }
  settings.lora = diffusion_common::read_lora_settings(config, models::latte_t2v_lora_targets());
  settings.ema_decay = config.get_real("ema.decay");
  if (settings.ema_decay < 0 || settings.ema_decay >= 1) config.fail("ema.decay", "must be in [0, 1)");
  settings.clip_start_step = get_int_at_least(config, "training.clip_start_step", 0);

  auto& sampling = settings.sampling;
  sampling.steps = get_int_at_least(config, "sampling.steps", 1);
  sampling.cfg_scale = config.get_real("sampling.cfg_scale");
  if (sampling.cfg_scale < 0) config.fail("sampling.cfg_scale", "must be >= 0");
  sampling.eta = config.get_real("sampling.eta");
  if (sampling.eta < 0) config.fail("sampling.eta", "must be >= 0");
  sampling.frames = get_int_at_least(config, "sampling.frames", 1);
  sampling.height = get_int_at_least(config, "sampling.height", 1);
  sampling.width = get_int_at_least(config, "sampling.width", 1);
  sampling.negative_prompt = config.get_string("sampling.negative_prompt");
  sampling.max_text_tokens = get_int_at_least(config, "sampling.max_text_tokens", 2);
  sampling.mask_feature = config.get_bool("sampling.mask_feature");
  sampling.caption_mask = config.get_bool("sampling.caption_mask");
  sampling.temporal_attention = config.get_bool("sampling.temporal_attention");
  sampling.fps = get_int_at_least(config, "sampling.fps", 1);
  settings.guidance = diffusion_common::read_guidance_settings(config, sampling.frames, "sampling.frames");
  return settings;
}

void validate_t2v_common_config(const config::Config& config) {
  (void)read_run_settings(config);
  (void)read_training_settings(config);
  (void)read_distributed_settings(config);
  (void)read_t2v_settings(config);
  validate_shard_blocks(config, {models::LatteT2VImpl::block_type(0), models::LatteT2VImpl::block_type(1)});
}

void validate_t2v_config(const config::Config& config) {
  validate_t2v_common_config(config);
  diffusion_common::check_training_param_dtype(config, read_t2v_settings(config).lora);
}

}  // namespace tune::recipes::latte_t2v
