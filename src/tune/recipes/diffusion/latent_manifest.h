// The latents.json manifest that `tune prepare` writes next to the latent files of a video-diffusion recipe: what
// the latents (and, for text-to-video, the caption embeddings) were made from, so that training from them can check
// that the recipe's data and model keys describe the same clips (a key that disagrees with the prepared latents is
// a config error, never silently overruled by the files).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/models/vae_config.h"
#include "tune/recipes/diffusion/video_data_settings.h"

namespace tune::recipes::diffusion_common {

// Captioned latents: each clip file also holds its caption's text-encoder output ("text" [L, D], "text_mask" [L]),
// and null_caption.safetensors the empty prompt's (caption dropout trains guidance with it).
struct TextManifest {
  std::string captions;              // data.path as given (the JSONL file or captioned folder)
  std::string text_encoder;          // the text encoder's directory, as given
  int64_t max_tokens = 0;            // L: captions padded (or cut) to this many tokens
  int64_t channels = 0;              // D
  std::string dtype;                 // "bf16" | "fp32": the encoder's, the embeddings' stored dtype
  bool operator==(const TextManifest&) const = default;
};

struct LatentManifest {
  std::vector<std::string> classes;  // class folder names, index = label (empty for captioned videos)
  int64_t videos = 0;                // videos encoded
  int64_t clips_per_video = 1;       // random clips (temporal crop, flip) drawn and encoded per video
  int64_t num_frames = 0, frame_interval = 0, image_size = 0;
  bool flip = false;
  std::string vae;                   // the VAE directory, as given
  int64_t latent_channels = 0, latent_size = 0;
  double scaling_factor = 0.0, shift_factor = 0.0;
  uint64_t seed = 0;
  std::optional<TextManifest> text;  // captioned (text-to-video) latents
  // data.images as given (text-to-video's use_image_num): its captioned images prepared under images/ in the same
  // layout (captions/, clips/ of one-frame latents), numbered in the image list's order.
  std::optional<std::string> images;
  // Sana's multi-scale latents: each image at its aspect-ratio bucket of image_size's table (latent_size is then
  // the square bucket's), so the clips' shapes differ. Absent from the file = false.
  bool aspect_ratio_buckets = false;
  bool complete = false;             // false while `tune prepare` runs (or after it was interrupted)
};

inline constexpr const char* kLatentManifestName = "latents.json";
inline constexpr const char* kNullCaptionName = "null_caption.safetensors";
inline constexpr const char* kJoinedImagesFolder = "images";

void write_latent_manifest(const std::filesystem::path& directory, const LatentManifest& manifest);
// Whether two manifests describe latents made the same way (ignoring progress: videos, complete, the VAE's path).
bool same_preparation(const LatentManifest& a, const LatentManifest& b);
// Throws tune::InputError naming DIR/latents.json when it is missing (not made by `tune prepare`) or malformed.
LatentManifest read_latent_manifest(const std::filesystem::path& directory);

// Recipe keys (data.num_frames, data.frame_interval, data.image_size, data.flip) and the VAE's geometry against
// what the latents were prepared with; the first disagreement fails naming the key (`vae_key` for the VAE, whose
// directory the recipe gives as `vae_name`).
// The geometry of an autoencoder's latent space, as the manifest records it.
struct LatentSpace {
  int64_t channels = 4;
  int64_t downscale = 8;  // pixels per latent along each side
  double scaling_factor = 1.0;
  double shift_factor = 0.0;
};
LatentSpace latent_space_of(const models::AutoencoderKLConfig& vae);
void check_latents_match(const LatentManifest& manifest, const std::filesystem::path& directory,
                         const VideoDataSettings& data, const std::string& vae_key, const std::string& vae_name,
                         const LatentSpace& vae, const config::Config& config);
inline void check_latents_match(const LatentManifest& manifest, const std::filesystem::path& directory,
                                const VideoDataSettings& data, const std::string& vae_key, const std::string& vae_name,
                                const models::AutoencoderKLConfig& vae, const config::Config& config) {
  check_latents_match(manifest, directory, data, vae_key, vae_name, latent_space_of(vae), config);
}

// `tune prepare`'s --out: refuses (UsageError, nothing written) a folder that holds anything but an earlier,
// identical preparation, which it continues.
void check_prepare_output_folder(const std::filesystem::path& out, const LatentManifest& planned);

}  // namespace tune::recipes::diffusion_common
