// The Latte schema and its translation into LatteSettings.
#include "tune/recipes/latte/latte_settings.h"

#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/guidance_settings.h"
#include "tune/recipes/diffusion/video_data_settings.h"

namespace tune::recipes::latte {

config::Schema latte_schema() {
  config::Schema schema = common_schema("latte");
  schema.path("model.path", "converted official weights or a checkpoint: model.safetensors + latte_config.json");
  schema.string("model.variant", "Latte-S/2", "Latte-S|B|L|XL / patch 2|4|8 (sizes below override it)");
  schema.integer("model.hidden_size", 0, "0 = the variant's (S 384, B 768, L 1024, XL 1152)");
  schema.integer("model.depth", 0, "blocks, spatial and temporal alternating; 0 = the variant's");
  schema.integer("model.num_heads", 0, "0 = the variant's");
  schema.integer("model.patch_size", 0, "0 = the variant's");
  schema.boolean("model.learn_sigma", true, "predict the variance too (hybrid loss)");
  schema.choice("model.extras", {"1", "2"}, "2", "1 unconditional, 2 class-conditional (Latte's extras)");
  schema.integer("model.num_classes", 0, "extras 2: 0 = the number of class folders in data.path");
  schema.real("model.class_dropout_prob", 0.1, "label dropout for classifier-free guidance");
  schema.path("model.vae", "diffusers AutoencoderKL directory; unset = diffusion in pixel space");
  schema.integer("model.vae_chunk_frames", 8, "frames per VAE encode/decode call (bounds memory)");

  diffusion_common::add_video_data_keys(schema, "folder of class sub-folders holding videos or frame folders "
                                                "(UCF-101 layout)", /*flip=*/true);

  schema.integer("diffusion.num_timesteps", 1000, "training diffusion steps");
  schema.choice("diffusion.beta_schedule", {"linear", "squaredcos_cap_v2"}, "linear", "noise schedule");
  schema.real("ema.decay", 0.9999,
              "EMA of the weights, used for sampling; 0 = none kept (the trained weights: no fp32 copy in memory)");
  schema.integer("training.clip_start_step", 0, "clip gradients only from this step on (Latte's start_clip_iter)");

  schema.choice("sampling.sampler", {"ddim", "ddpm"}, "ddim", "tune infer: sampler");
  schema.integer("sampling.steps", 50, "tune infer: sampling steps (respaced)");
  schema.real("sampling.eta", 0.0, "tune infer: DDIM eta");
  schema.real("sampling.cfg_scale", 1.0, "tune infer: classifier-free guidance scale (extras 2); 1 = off");
  schema.integer("sampling.fps", 8, "tune infer: frame rate of the written video");
  schema.integer("sampling.num_samples", 1, "tune infer: videos per call");

  diffusion_common::add_guidance_keys(schema);
  return schema;
}

LatteSettings read_latte_settings(const config::Config& config) {
  LatteSettings settings;
  auto& model = settings.model;
  if (config.has("model.path")) model.path = config.get_string("model.path");
  model.variant = config.get_string("model.variant");
  model.hidden_size = get_int_at_least(config, "model.hidden_size", 0);
  model.depth = get_int_at_least(config, "model.depth", 0);
  model.num_heads = get_int_at_least(config, "model.num_heads", 0);
  model.patch_size = get_int_at_least(config, "model.patch_size", 0);
  model.learn_sigma = config.get_bool("model.learn_sigma");
  model.extras = std::stoll(config.get_string("model.extras"));
  model.num_classes = get_int_at_least(config, "model.num_classes", 0);
  model.class_dropout_prob = config.get_real("model.class_dropout_prob");
  if (model.class_dropout_prob < 0 || model.class_dropout_prob >= 1) config.fail("model.class_dropout_prob", "must be in [0, 1)");
  if (config.has("model.vae")) model.vae = config.get_string("model.vae");
  model.vae_chunk_frames = get_int_at_least(config, "model.vae_chunk_frames", 1);

  auto& data = settings.data;
  data = diffusion_common::read_video_data_settings(config);
  if (!data.path && !data.latents) {
    config.fail("data.path", "is required: a folder of class sub-folders of videos (or set data.latents to latents "
                             "written by `tune prepare`)");
  }

  settings.diffusion.num_timesteps = get_int_at_least(config, "diffusion.num_timesteps", 2);
  settings.diffusion.beta_schedule = config.get_string("diffusion.beta_schedule");
  settings.ema_decay = config.get_real("ema.decay");
  if (settings.ema_decay < 0 || settings.ema_decay >= 1) config.fail("ema.decay", "must be in [0, 1)");
  settings.clip_start_step = get_int_at_least(config, "training.clip_start_step", 0);

  auto& sampling = settings.sampling;
  sampling.sampler = config.get_string("sampling.sampler");
  sampling.steps = get_int_at_least(config, "sampling.steps", 1);
  if (sampling.steps > settings.diffusion.num_timesteps) {
    config.fail("sampling.steps", fmt::format("({}) cannot exceed diffusion.num_timesteps ({})", sampling.steps,
                                              settings.diffusion.num_timesteps));
  }
  sampling.eta = config.get_real("sampling.eta");
  sampling.cfg_scale = config.get_real("sampling.cfg_scale");
  if (sampling.cfg_scale != 1.0 && model.extras != 2) {
    config.fail("sampling.cfg_scale", "classifier-free guidance needs a class-conditional model (model.extras: 2)");
  }
  sampling.fps = get_int_at_least(config, "sampling.fps", 1);
  sampling.num_samples = get_int_at_least(config, "sampling.num_samples", 1);

  settings.guidance = diffusion_common::read_guidance_settings(config, data.num_frames, "data.num_frames");
  return settings;
}

}  // namespace tune::recipes::latte
