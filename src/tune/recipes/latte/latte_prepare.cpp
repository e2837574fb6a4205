// `tune prepare` for the Latte recipe: every video of data.path -> clips drawn as training would draw them
// (num_frames at frame_interval, random temporal crop, resize + centre crop, random flip) -> VAE latents, one
// safetensors file per clip, plus latents.json. Training with data.latents then needs no VAE in memory.
// Interrupted runs continue: files already written are kept and skipped; a folder holding other latents or
// anything else is never written into.
#include <ATen/CPUGeneratorImpl.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/latent_manifest.h"
#include "tune/recipes/latte/latte_data.h"
#include "tune/models/vae.h"
#include "tune/recipes/latte/latte_recipe.h"

namespace tune::recipes::latte {
using namespace diffusion_common;
namespace {

std::filesystem::path latent_file(const std::filesystem::path& out, const std::string& class_name,
                                  const std::filesystem::path& video, int64_t clip, int64_t clips_per_video) {
  std::string name = video.filename().string();
  if (clips_per_video > 1) name += fmt::format("-c{}", clip);
  return out / class_name / (name + ".safetensors");
}

}  // namespace

int prepare(const PrepareRequest& request) {
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  const LatteSettings latte = read_latte_settings(config);
  if (!latte.model.vae) {
    config.fail("model.vae", "is not set: tune prepare encodes videos into VAE latents, and a pixel-space recipe "
                             "trains from the videos directly");
  }
  if (!request.out && !latte.data.latents) {
    throw UsageError("where should the latents go? pass --out DIR or set data.latents in the recipe");
  }
  const std::filesystem::path out = request.out ? *request.out : std::filesystem::path(*latte.data.latents);
  if (!latte.data.path) config.fail("data.path", "is required: tune prepare encodes the videos found there");

  const int threads = configure_threads(run.threads);
  const torch::Device device(run.device);
  auto dataset = make_video_dataset(latte);
  auto vae = models::load_autoencoder_kl(*latte.model.vae);
  for (auto& param : vae->parameters()) param.set_requires_grad(false);
  vae->to(device);
  const auto& vae_config = vae->config();
  if (latte.data.image_size % vae_config.downscale_factor() != 0) {
    config.fail("data.image_size", fmt::format("({}) must be divisible by the VAE's downsampling factor ({})",
                                               latte.data.image_size, vae_config.downscale_factor()));
  }

  LatentManifest manifest;
  manifest.classes = dataset->classes();
  manifest.videos = dataset->size();
  manifest.clips_per_video = request.clips_per_video;
  manifest.num_frames = latte.data.num_frames;
  manifest.frame_interval = latte.data.frame_interval;
  manifest.image_size = latte.data.image_size;
  manifest.flip = latte.data.flip;
  manifest.vae = *latte.model.vae;
  manifest.latent_channels = vae_config.latent_channels;
  manifest.latent_size = latte.data.image_size / vae_config.downscale_factor();
  manifest.scaling_factor = vae_config.scaling_factor;
  manifest.shift_factor = vae_config.shift_factor;
  manifest.seed = run.seed;
  check_prepare_output_folder(out, manifest);
  for (const auto& name : manifest.classes) std::filesystem::create_directories(out / name);
  write_latent_manifest(out, manifest);

  log::info("preparing VAE latents: {} videos in {} classes from {} -> {} ({} clip(s) per video of {} frames at "
            "interval {}, {}x{} -> {} x {}x{} latents; fp32 VAE; device {}, {} threads)",
            dataset->size(), manifest.classes.size(), *latte.data.path, out.string(), request.clips_per_video,
            manifest.num_frames, manifest.frame_interval, manifest.image_size, manifest.image_size,
            manifest.latent_channels, manifest.latent_size, manifest.latent_size, run.device, threads);
  int64_t written = 0, kept = 0;
  const int64_t report_every = std::max<int64_t>(1, dataset->size() / 10);
  for (int64_t index = 0; index < dataset->size(); ++index) {
    const auto& video = dataset->item_path(index);
    const std::string& class_name = manifest.classes[static_cast<size_t>(dataset->item_label(index))];
    for (int64_t clip = 0; clip < request.clips_per_video; ++clip) {
      const auto file = latent_file(out, class_name, video, clip, request.clips_per_video);
      if (std::filesystem::exists(file)) {
        ++kept;
        continue;
      }
      // Each clip's crop, flip and posterior sample come from (seed, video, clip): a rerun writes the same files.
      const uint64_t clip_seed = run.seed * 1000003ULL + static_cast<uint64_t>(index) * 64 + static_cast<uint64_t>(clip);
      std::mt19937_64 generator(clip_seed);
      const auto example = dataset->get(index, generator);
      if (example.index != index) break;  // unreadable and skipped (logged and counted by the dataset)
      at::Generator noise = at::detail::createCPUGenerator(clip_seed);
      const auto latent = vae->encode_frames(example.video.unsqueeze(0).to(device), latte.model.vae_chunk_frames,
                                             models::LatentSampling::kSample, noise);
      data::save_latent(file, latent[0], example.label);
      ++written;
    }
    if ((index + 1) % report_every == 0 || index + 1 == dataset->size()) {
      log::info("  {}/{} videos ({} clip files written, {} kept from before)", index + 1, dataset->size(), written, kept);
    }
  }
  manifest.videos = dataset->size() - dataset->skipped_count();
  manifest.complete = true;
  write_latent_manifest(out, manifest);
  log::info("done: {} latent files in {} ({} skipped videos); train from them with data.latents={}", written + kept,
            out.string(), dataset->skipped_count(), out.string());
  return 0;
}

}  // namespace tune::recipes::latte
