// Building Latte (and the optional VAE) from the recipe's settings: the variant preset with size overrides, the
// input geometry of pixel or latent space, and weights from model.path or a checkpoint.
#pragma once

#include <filesystem>
#include <optional>

#include "tune/models/latte.h"
#include "tune/models/vae.h"
#include "tune/recipes/latte/latte_settings.h"

namespace tune::recipes::latte {

struct LatteParts {
  models::Latte model{nullptr};
  std::optional<models::AutoencoderKL> vae;  // unset: pixel space, or VaeUse::geometry_only
};

enum class VaeUse {
  load,           // the VAE's weights are loaded: training encodes videos, sampling decodes
  geometry_only,  // only its config.json is read (latent channels and size): training on prepared latents
};

// num_classes_in_data: class folders found in data.path (used when model.num_classes is 0).
models::LatteConfig make_latte_config(const LatteSettings& settings, int64_t num_classes_in_data,
                                      const std::optional<models::AutoencoderKLConfig>& vae);

// Builds the model (seeded official initialisation, or weights from model.path) and loads the VAE if configured.
LatteParts build_latte(const LatteSettings& settings, int64_t num_classes_in_data, uint64_t seed,
                       VaeUse vae_use = VaeUse::load);

// Loads `file` (official parameter names) into the model.
void load_latte_weights(models::Latte& model, const std::filesystem::path& file);

// Pixel-space videos [B, F, 3, S, S] in [-1, 1] -> what the diffusion model sees (VAE latents or the pixels).
torch::Tensor to_model_space(LatteParts& parts, const torch::Tensor& videos, int64_t chunk_frames);
// And back: model-space samples -> pixel videos in [-1, 1].
torch::Tensor to_pixel_space(LatteParts& parts, const torch::Tensor& samples, int64_t chunk_frames);

}  // namespace tune::recipes::latte
