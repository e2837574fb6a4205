// Latte construction for the recipe.
#include "tune/recipes/latte/latte_model.h"

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/weights.h"

namespace tune::recipes::latte {

models::LatteConfig make_latte_config(const LatteSettings& settings, int64_t num_classes_in_data,
                                      const std::optional<models::AutoencoderKLConfig>& vae) {
  const auto& model = settings.model;
  models::LatteConfig config;
  if (model.path) {
    const std::filesystem::path dir(*model.path);
    // Before latte_config.json, scripts/convert_latte_checkpoint.py wrote config.json, the name LLM directories use.
    if (!std::filesystem::exists(dir / "latte_config.json") && std::filesystem::exists(dir / "config.json")) {
      throw InputError(fmt::format("model.path {}: no latte_config.json (Latte's config file); if its config.json is "
                                   "a Latte config from an older scripts/convert_latte_checkpoint.py, rename it to "
                                   "latte_config.json or convert the checkpoint again",
                                   dir.string()));
    }
    config = models::LatteConfig::from_file((dir / "latte_config.json").string());
  } else {
    config = models::latte_preset(model.variant);
    if (model.hidden_size > 0) config.hidden_size = model.hidden_size;
    if (model.depth > 0) config.depth = model.depth;
    if (model.num_heads > 0) config.num_heads = model.num_heads;
    if (model.patch_size > 0) config.patch_size = model.patch_size;
    config.learn_sigma = model.learn_sigma;
    config.extras = model.extras;
    config.class_dropout_prob = model.class_dropout_prob;
    config.num_classes = model.extras == 2 ? (model.num_classes > 0 ? model.num_classes : num_classes_in_data) : 0;
    config.num_frames = settings.data.num_frames;
    if (vae) {
      const int64_t factor = vae->downscale_factor();
      if (settings.data.image_size % factor != 0) {
        throw UsageError(fmt::format("data.image_size ({}) must be divisible by the VAE's downsampling factor ({})",
                                     settings.data.image_size, factor));
      }
      config.in_channels = vae->latent_channels;
      config.input_size = settings.data.image_size / factor;
    } else {
      config.in_channels = 3;
      config.input_size = settings.data.image_size;
    }
  }
  config.validate(model.path ? *model.path + "/latte_config.json" : "the recipe's model.* keys");
  if (config.num_frames != settings.data.num_frames) {
    throw UsageError(fmt::format("the model was built for {} frames but data.num_frames is {}", config.num_frames,
                                 settings.data.num_frames));
  }
  return config;
}

void load_latte_weights(models::Latte& model, const std::filesystem::path& file) {
  const size_t loaded = io::load_into_module(*model, io::WeightSource::open_file(file));
  log::info("loaded {} tensors from {}", loaded, file.string());
}

LatteParts build_latte(const LatteSettings& settings, int64_t num_classes_in_data, uint64_t seed, VaeUse vae_use) {
  LatteParts parts;
  std::optional<models::AutoencoderKLConfig> vae_config;
  if (settings.model.vae && vae_use == VaeUse::geometry_only) {
    vae_config = models::load_autoencoder_kl_config(*settings.model.vae);
  } else if (settings.model.vae) {
    parts.vae = models::load_autoencoder_kl(*settings.model.vae);
    (*parts.vae)->eval();
    for (auto& param : (*parts.vae)->parameters()) param.set_requires_grad(false);
    vae_config = (*parts.vae)->config();
  }
  torch::manual_seed(seed);
  parts.model = models::Latte(make_latte_config(settings, num_classes_in_data, vae_config));
  if (settings.model.path) load_latte_weights(parts.model, std::filesystem::path(*settings.model.path) / "model.safetensors");
  return parts;
}

torch::Tensor to_model_space(LatteParts& parts, const torch::Tensor& videos, int64_t chunk_frames) {
  if (!parts.vae) return videos;
  return (*parts.vae)->encode_frames(videos, chunk_frames);
}

torch::Tensor to_pixel_space(LatteParts& parts, const torch::Tensor& samples, int64_t chunk_frames) {
  if (!parts.vae) return samples.clamp(-1.0, 1.0);
  return (*parts.vae)->decode_frames(samples, chunk_frames).clamp(-1.0, 1.0);
}

}  // namespace tune::recipes::latte
