// latents.json: writing, reading with errors that name the file, and checking against a recipe.
#include "tune/recipes/latte/latte_latents.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/io/json_file.h"

namespace tune::recipes::latte {

void write_latent_manifest(const std::filesystem::path& directory, const LatentManifest& manifest) {
  io::write_json_file(directory / kLatentManifestName,
                      {{"format", "tune-latents-v1"},
                       {"classes", manifest.classes},
                       {"videos", manifest.videos},
                       {"clips_per_video", manifest.clips_per_video},
                       {"num_frames", manifest.num_frames},
                       {"frame_interval", manifest.frame_interval},
                       {"image_size", manifest.image_size},
                       {"flip", manifest.flip},
                       {"vae", manifest.vae},
                       {"latent_channels", manifest.latent_channels},
                       {"latent_size", manifest.latent_size},
                       {"scaling_factor", manifest.scaling_factor},
                       {"shift_factor", manifest.shift_factor},
                       {"seed", manifest.seed},
                       {"complete", manifest.complete}});
}

bool same_preparation(const LatentManifest& a, const LatentManifest& b) {
  return a.classes == b.classes && a.clips_per_video == b.clips_per_video && a.num_frames == b.num_frames &&
         a.frame_interval == b.frame_interval && a.image_size == b.image_size && a.flip == b.flip &&
         a.latent_channels == b.latent_channels && a.latent_size == b.latent_size &&
         a.scaling_factor == b.scaling_factor && a.shift_factor == b.shift_factor && a.seed == b.seed;
}

LatentManifest read_latent_manifest(const std::filesystem::path& directory) {
  const auto file = directory / kLatentManifestName;
  if (!std::filesystem::exists(file)) {
    throw InputError(fmt::format("{}: missing; data.latents must be a folder written by `tune prepare`", file.string()));
  }
  const nlohmann::json json = io::read_json_file(file, "the latents manifest");
  LatentManifest manifest;
  try {
    if (json.value("format", "") != "tune-latents-v1") throw InputError("format is not tune-latents-v1");
    json.at("classes").get_to(manifest.classes);
    json.at("videos").get_to(manifest.videos);
    json.at("clips_per_video").get_to(manifest.clips_per_video);
    json.at("num_frames").get_to(manifest.num_frames);
    json.at("frame_interval").get_to(manifest.frame_interval);
    json.at("image_size").get_to(manifest.image_size);
    json.at("flip").get_to(manifest.flip);
    json.at("vae").get_to(manifest.vae);
    json.at("latent_channels").get_to(manifest.latent_channels);
    json.at("latent_size").get_to(manifest.latent_size);
    json.at("scaling_factor").get_to(manifest.scaling_factor);
    json.at("shift_factor").get_to(manifest.shift_factor);
    json.at("seed").get_to(manifest.seed);
    json.at("complete").get_to(manifest.complete);
  } catch (const std::exception& error) {
    throw InputError(fmt::format("{}: not a valid latents manifest: {}", file.string(), error.what()));
  }
  return manifest;
}

void check_latents_match(const LatentManifest& manifest, const std::filesystem::path& directory,
                         const LatteSettings& settings, const models::AutoencoderKLConfig& vae,
                         const config::Config& config) {
  const std::string source = (directory / kLatentManifestName).string();
  const auto require_equal = [&](const std::string& key, auto recipe_value, auto prepared_value) {
    if (recipe_value == prepared_value) return;
    config.fail(key, fmt::format("is {} but the latents in {} were prepared with {} (see {}); prepare them again "
                                 "with this recipe or set {}: {}",
                                 recipe_value, directory.string(), prepared_value, source, key, prepared_value));
  };
  require_equal("data.num_frames", settings.data.num_frames, manifest.num_frames);
  require_equal("data.frame_interval", settings.data.frame_interval, manifest.frame_interval);
  require_equal("data.image_size", settings.data.image_size, manifest.image_size);
  require_equal("data.flip", settings.data.flip, manifest.flip);
  if (vae.latent_channels != manifest.latent_channels ||
      settings.data.image_size / vae.downscale_factor() != manifest.latent_size ||
      vae.scaling_factor != manifest.scaling_factor || vae.shift_factor != manifest.shift_factor) {
    config.fail("model.vae", fmt::format("({}) does not match the VAE the latents in {} were made with ({}: {} "
                                         "channels at {}x{}, scaling {}, shift {})",
                                         settings.model.vae.value_or(""), directory.string(), manifest.vae,
                                         manifest.latent_channels, manifest.latent_size, manifest.latent_size,
                                         manifest.scaling_factor, manifest.shift_factor));
  }
}

}  // namespace tune::recipes::latte
