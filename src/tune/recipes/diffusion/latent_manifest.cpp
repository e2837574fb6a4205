// latents.json of the video recipes: writing, reading with errors that name the file, and checking against a recipe.
#include "tune/recipes/diffusion/latent_manifest.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::recipes::diffusion_common {

void write_latent_manifest(const std::filesystem::path& directory, const LatentManifest& manifest) {
  nlohmann::json json = {{"format", "tune-latents-v1"},
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
                       {"complete", manifest.complete}};
  if (manifest.text) {
    json["text"] = {{"captions", manifest.text->captions},     {"text_encoder", manifest.text->text_encoder},
                    {"max_tokens", manifest.text->max_tokens}, {"channels", manifest.text->channels},
                    {"dtype", manifest.text->dtype}};
  }
  if (manifest.images) json["images"] = *manifest.images;
  if (manifest.aspect_ratio_buckets) json["aspect_ratio_buckets"] = true;
  io::write_json_file(directory / kLatentManifestName, json);
}

bool same_preparation(const LatentManifest& a, const LatentManifest& b) {
  return a.classes == b.classes && a.clips_per_video == b.clips_per_video && a.num_frames == b.num_frames &&
         a.frame_interval == b.frame_interval && a.image_size == b.image_size && a.flip == b.flip &&
         a.latent_channels == b.latent_channels && a.latent_size == b.latent_size &&
         a.scaling_factor == b.scaling_factor && a.shift_factor == b.shift_factor && a.seed == b.seed &&
         a.text == b.text && a.images == b.images && a.aspect_ratio_buckets == b.aspect_ratio_buckets;
}

LatentManifest read_latent_manifest(const std::filesystem::path& directory) {
  const auto file = directory / kLatentManifestName;
  if (!std::filesystem::exists(file)) {
    throw InputError(fmt::format("{}: missing; data.latents must be a folder written by `tune prepare`", file.string()));
  }
  const nlohmann::json json = io::read_json_file(file, "the latents manifest");
  if (!json.is_object()) throw InputError(fmt::format("{}: not a valid latents manifest: not a JSON object", file.string()));
  const io::JsonFields fields(json, file.string());
  if (fields.string("format", "") != "tune-latents-v1") fields.fail("format", "must be \"tune-latents-v1\"");
  LatentManifest manifest;
  if (!json.contains("classes") || !json.at("classes").is_array()) fields.fail("classes", "must be a list of strings");
  for (const nlohmann::json& name : json.at("classes")) {
    if (!name.is_string()) fields.fail("classes", "must be a list of strings");
    manifest.classes.push_back(name.get<std::string>());
  }
  manifest.videos = fields.integer("videos");
  manifest.clips_per_video = fields.integer("clips_per_video");
  manifest.num_frames = fields.integer("num_frames");
  manifest.frame_interval = fields.integer("frame_interval");
  manifest.image_size = fields.integer("image_size");
  manifest.flip = fields.boolean("flip");
  manifest.vae = fields.string("vae");
  manifest.latent_channels = fields.integer("latent_channels");
  manifest.latent_size = fields.integer("latent_size");
  manifest.scaling_factor = fields.real("scaling_factor");
  manifest.shift_factor = fields.real("shift_factor");
  // The seed is a uint64 (written as such); JsonFields reads int64, so it is checked here.
  if (!json.contains("seed") || !json.at("seed").is_number_unsigned()) fields.fail("seed", "must be a non-negative integer");
  manifest.seed = json.at("seed").get<uint64_t>();
  manifest.complete = fields.boolean("complete");
  if (json.contains("text")) {
    if (!json.at("text").is_object()) fields.fail("text", "must be an object");
    const io::JsonFields text(json.at("text"), file.string() + " (text)");
    TextManifest parsed;
    parsed.captions = text.string("captions");
    parsed.text_encoder = text.string("text_encoder");
    parsed.max_tokens = text.integer("max_tokens");
    parsed.channels = text.integer("channels");
    parsed.dtype = text.string("dtype");
    if (parsed.max_tokens < 1 || parsed.channels < 1) text.fail("max_tokens", "and channels must be positive");
    if (parsed.dtype != "bf16" && parsed.dtype != "fp32") text.fail("dtype", "must be \"bf16\" or \"fp32\"");
    manifest.text = parsed;
  }
  if (json.contains("images")) manifest.images = fields.string("images");
  manifest.aspect_ratio_buckets = fields.boolean("aspect_ratio_buckets", false);
  return manifest;
}

LatentSpace latent_space_of(const models::AutoencoderKLConfig& vae) {
  return {vae.latent_channels, vae.downscale_factor(), vae.scaling_factor, vae.shift_factor};
}

void check_latents_match(const LatentManifest& manifest, const std::filesystem::path& directory,
                         const VideoDataSettings& data, const std::string& vae_key, const std::string& vae_name,
                         const LatentSpace& vae, const config::Config& config) {
  const std::string source = (directory / kLatentManifestName).string();
  const auto require_equal = [&](const std::string& key, auto recipe_value, auto prepared_value) {
    if (recipe_value == prepared_value) return;
    config.fail(key, fmt::format("is {} but the latents in {} were prepared with {} (see {}); prepare them again "
                                 "with this recipe or set {}: {}",
                                 recipe_value, directory.string(), prepared_value, source, key, prepared_value));
  };
  require_equal("data.num_frames", data.num_frames, manifest.num_frames);
  require_equal("data.frame_interval", data.frame_interval, manifest.frame_interval);
  require_equal("data.image_size", data.image_size, manifest.image_size);
  require_equal("data.flip", data.flip, manifest.flip);
  if (vae.channels != manifest.latent_channels || data.image_size / vae.downscale != manifest.latent_size ||
      vae.scaling_factor != manifest.scaling_factor || vae.shift_factor != manifest.shift_factor) {
    config.fail(vae_key, fmt::format("({}) does not match the VAE the latents in {} were made with ({}: {} "
                                     "channels at {}x{}, scaling {}, shift {})",
                                     vae_name, directory.string(), manifest.vae, manifest.latent_channels,
                                     manifest.latent_size, manifest.latent_size, manifest.scaling_factor,
                                     manifest.shift_factor));
  }
}

void check_prepare_output_folder(const std::filesystem::path& out, const LatentManifest& planned) {
  if (!std::filesystem::exists(out)) return;
  if (!std::filesystem::is_directory(out)) throw UsageError(fmt::format("--out {}: exists and is not a folder", out.string()));
  if (std::filesystem::exists(out / kLatentManifestName)) {
    const LatentManifest existing = read_latent_manifest(out);
    if (!same_preparation(existing, planned)) {
      throw UsageError(fmt::format("{} holds latents prepared with other settings ({}); choose another --out or "
                                   "delete it (nothing was written)", out.string(), (out / kLatentManifestName).string()));
    }
    log::info("{}: continuing an earlier preparation with the same settings (existing files are kept)", out.string());
    return;
  }
  if (!std::filesystem::is_empty(out)) {
    throw UsageError(fmt::format("--out {}: folder is not empty and holds no {}; refusing to write into it",
                                 out.string(), kLatentManifestName));
  }
}

}  // namespace tune::recipes::diffusion_common
