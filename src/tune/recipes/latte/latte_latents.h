// The latents.json manifest that `tune prepare` writes next to the latent files: what the latents were made from,
// so that training from them can check that the recipe's data and model keys describe the same clips (a key that
// disagrees with the prepared latents is a config error, never silently overruled by the files).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/models/vae_config.h"
#include "tune/recipes/latte/latte_settings.h"

namespace tune::recipes::latte {

struct LatentManifest {
  std::vector<std::string> classes;  // class folder names, index = label
  int64_t videos = 0;                // videos encoded
  int64_t clips_per_video = 1;       // random clips (temporal crop, flip) drawn and encoded per video
  int64_t num_frames = 0, frame_interval = 0, image_size = 0;
  bool flip = false;
  std::string vae;                   // the VAE directory, as given
  int64_t latent_channels = 0, latent_size = 0;
  double scaling_factor = 0.0, shift_factor = 0.0;
  uint64_t seed = 0;
  bool complete = false;             // false while `tune prepare` runs (or after it was interrupted)
};

inline constexpr const char* kLatentManifestName = "latents.json";

void write_latent_manifest(const std::filesystem::path& directory, const LatentManifest& manifest);
// Whether two manifests describe latents made the same way (ignoring progress: videos, complete, the VAE's path).
bool same_preparation(const LatentManifest& a, const LatentManifest& b);
// Throws tune::InputError naming DIR/latents.json when it is missing (not made by `tune prepare`) or malformed.
LatentManifest read_latent_manifest(const std::filesystem::path& directory);

// Recipe keys (data.num_frames, data.frame_interval, data.image_size, data.flip) and the VAE's geometry against
// what the latents were prepared with; the first disagreement fails naming the key.
void check_latents_match(const LatentManifest& manifest, const std::filesystem::path& directory,
                         const LatteSettings& settings, const models::AutoencoderKLConfig& vae,
                         const config::Config& config);

}  // namespace tune::recipes::latte
