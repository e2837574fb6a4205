// `tune prepare` for text-to-video Latte: the captioned videos of data.path -> (1) every caption and the empty
// prompt through the T5 encoder (padded to sampling.max_text_tokens, with masks), then the encoder is freed;
// (2) clips drawn as training would draw them -> VAE latents; with data.images (use_image_num) its captions and
// one-frame latents too, under images/. Written as diffusion/captioned_latents.h lays out, with latents.json;
// training with data.latents then loads neither encoder. Interrupted runs continue: files already written are kept
// and skipped; a folder holding other latents or anything else is never written into.
#include <ATen/CPUGeneratorImpl.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/threads.h"
#include "tune/data/captioned_images.h"
#include "tune/data/captioned_videos.h"
#include "tune/data/tokenizer.h"
#include "tune/models/t5_encoder.h"
#include "tune/models/vae.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/latent_manifest.h"
#include "tune/recipes/diffusion/captioned_latents.h"
#include "tune/recipes/diffusion/training_images.h"
#include "tune/recipes/latte_t2v/t2v_pipeline.h"
#include "tune/recipes/latte_t2v/t2v_prompt.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"

namespace tune::recipes::latte_t2v {
namespace {

constexpr int64_t kCaptionBatch = 16;  // captions per T5 call

// Phase 1 for one folder: the captions not written yet into FOLDER/captions, in batches.
void encode_pending_captions(const std::filesystem::path& folder, const std::vector<std::string>& captions,
                             models::T5EncoderImpl& encoder, const data::Tokenizer& tokenizer, int64_t max_tokens,
                             const std::string& what) {
  std::filesystem::create_directories(folder / "captions");
  std::vector<int64_t> pending;
  for (int64_t i = 0; i < static_cast<int64_t>(captions.size()); ++i) {
    if (!std::filesystem::exists(diffusion_common::caption_file(folder, i))) pending.push_back(i);
  }
  for (size_t begin = 0; begin < pending.size(); begin += kCaptionBatch) {
    const size_t end = std::min(pending.size(), begin + kCaptionBatch);
    std::vector<std::string> batch;
    for (size_t k = begin; k < end; ++k) batch.push_back(captions[static_cast<size_t>(pending[k])]);
    const auto embedded = encode_captions(encoder, tokenizer, batch, max_tokens);
    for (size_t k = begin; k < end; ++k) {
      const auto row = static_cast<int64_t>(k - begin);
      diffusion_common::save_caption(diffusion_common::caption_file(folder, pending[k]), embedded.text[row],
                                     embedded.mask[row]);
    }
  }
  log::info("{}: {} encoded ({} kept from before)", what, pending.size(), captions.size() - pending.size());
}

// Phase 1: the empty prompt, the videos' captions and the joined images' (data.images); the encoder is gone on
// return.
void encode_all_captions(const std::filesystem::path& out, const data::CaptionedVideoList& videos,
                         const std::optional<data::CaptionedImageList>& images, const ComponentPaths& paths,
                         torch::ScalarType dtype, const torch::Device& device, int64_t max_tokens) {
  const auto tokenizer = data::Tokenizer::load(paths.tokenizer);
  auto encoder = models::load_t5_encoder(paths.text_encoder, dtype, device);
  std::filesystem::create_directories(out);
  if (!std::filesystem::exists(out / diffusion_common::kNullCaptionName)) {
    const auto null = encode_captions(*encoder, tokenizer, {""}, max_tokens);
    diffusion_common::save_caption(out / diffusion_common::kNullCaptionName, null.text[0], null.mask[0]);
  }
  std::vector<std::string> captions;
  for (const auto& video : videos.videos) captions.push_back(video.caption);
  encode_pending_captions(out, captions, *encoder, tokenizer, max_tokens, "captions");
  if (images) {
    captions.clear();
    for (const auto& image : images->images) captions.push_back(image.caption);
    encode_pending_captions(out / diffusion_common::kJoinedImagesFolder, captions, *encoder, tokenizer, max_tokens,
                            "image captions");
  }
  log::info("captions encoded with T5 ({}), {} tokens each; text encoder freed", paths.text_encoder.string(),
            max_tokens);
}

// Phase 2 for data.images: each image resized and center-cropped to data.image_size -> a one-frame latent in
// images/clips (its posterior sampled from (seed, image), as a video clip's is). Returns the images skipped.
int64_t encode_joined_images(const std::filesystem::path& out, const data::CaptionedImageList& images,
                             models::AutoencoderKLImpl& vae, const T2VDataSettings& data, uint64_t seed,
                             const torch::Device& device) {
  const auto folder = out / diffusion_common::kJoinedImagesFolder;
  std::filesystem::create_directories(folder / "clips");
  int64_t written = 0, kept = 0, unreadable = 0;
  const auto count = static_cast<int64_t>(images.images.size());
  for (int64_t index = 0; index < count; ++index) {
    const auto file = diffusion_common::clip_file(folder, index, 0, 1);
    if (std::filesystem::exists(file)) {
      ++kept;
    } else if (auto pixels = diffusion_common::read_training_image_or_skip(
                   images.images[static_cast<size_t>(index)].image, data.image_size, data.skip_bad_videos,
                   "data.on_bad_video: skip")) {
      // (seed, image), apart from the video clips' (seed, video, clip) seeds
      const uint64_t image_seed = seed * 1000003ULL + 999983ULL + static_cast<uint64_t>(index);
      at::Generator noise = at::detail::createCPUGenerator(image_seed);
      const auto latent = vae.encode_frames(pixels->view({1, 1, 3, data.image_size, data.image_size}).to(device), 1,
                                            models::LatentSampling::kSample, noise);
      data::save_latent(file, latent[0].cpu(), index);  // [1, C, h, w]
      ++written;
    } else {
      ++unreadable;
    }
  }
  log::info("  {} images joined to the clips: {} latent files written, {} kept from before, {} unreadable and skipped",
            count, written, kept, unreadable);
  return unreadable;
}

}  // namespace

int prepare(const PrepareRequest& request) {
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  const T2VSettings settings = read_t2v_settings(config);
  const auto& data = settings.data;
  if (!request.out && !data.latents) {
    throw UsageError("where should the latents go? pass --out DIR or set data.latents in the recipe");
  }
  const std::filesystem::path out = request.out ? *request.out : std::filesystem::path(*data.latents);
  if (!data.path) config.fail("data.path", "is required: tune prepare encodes the captioned videos found there");
  if (!std::filesystem::exists(*data.path)) config.fail("data.path", fmt::format("names '{}', which does not exist", *data.path));
  const ComponentPaths paths = resolve_components(settings.model);

  const int threads = configure_threads(run.threads);
  const torch::Device device(run.device);
  const auto on_bad = data.skip_bad_videos ? data::OnBadVideo::skip : data::OnBadVideo::fail;
  const auto list = data::read_captioned_videos(*data.path, on_bad);
  std::optional<data::CaptionedImageList> images;
  if (data.images) {
    if (!std::filesystem::exists(*data.images)) {
      config.fail("data.images", fmt::format("names '{}', which does not exist", *data.images));
    }
    images = data::read_captioned_images(*data.images, on_bad);
    if (images->images.empty()) config.fail("data.images", fmt::format("'{}' holds no captioned image", *data.images));
  }
  const auto vae_config = models::load_autoencoder_kl_config(paths.vae);
  if (data.image_size % vae_config.downscale_factor() != 0) {
    config.fail("data.image_size", fmt::format("({}) must be divisible by the VAE's downsampling factor ({})",
                                               data.image_size, vae_config.downscale_factor()));
  }
  const auto text_dtype = text_encoder_dtype(settings.model.text_encoder_dtype, run.mixed_precision);
  const auto text_config = models::read_t5_encoder_config(paths.text_encoder / "config.json");

  diffusion_common::LatentManifest manifest;
  manifest.videos = static_cast<int64_t>(list.videos.size());
  manifest.clips_per_video = request.clips_per_video;
  manifest.num_frames = data.num_frames;
  manifest.frame_interval = data.frame_interval;
  manifest.image_size = data.image_size;
  manifest.flip = data.flip;
  manifest.vae = paths.vae.string();
  manifest.latent_channels = vae_config.latent_channels;
  manifest.latent_size = data.image_size / vae_config.downscale_factor();
  manifest.scaling_factor = vae_config.scaling_factor;
  manifest.shift_factor = vae_config.shift_factor;
  manifest.seed = run.seed;
  manifest.text = diffusion_common::TextManifest{*data.path, paths.text_encoder.string(),
                                                 settings.sampling.max_text_tokens, text_config.d_model,
                                                 text_dtype == torch::kBFloat16 ? "bf16" : "fp32"};
  manifest.images = data.images;
  diffusion_common::check_prepare_output_folder(out, manifest);
  std::filesystem::create_directories(out / "clips");
  diffusion_common::write_latent_manifest(out, manifest);
  log::info("preparing text-to-video latents: {} captioned videos from {} ({} skipped) -> {} ({} clip(s) per video of "
            "{} frames at interval {}, {}x{} -> {} x {}x{} latents; device {}, {} threads)",
            list.videos.size(), *data.path, list.skipped, out.string(), request.clips_per_video, manifest.num_frames,
            manifest.frame_interval, manifest.image_size, manifest.image_size, manifest.latent_channels,
            manifest.latent_size, manifest.latent_size, run.device, threads);

  // ---- phase 1: text (T5 freed before the VAE loads)
  if (images) {
    log::info("and {} captioned images from {} ({} skipped), {} of them joined to each clip in training",
              images->images.size(), *data.images, images->skipped, data.use_image_num);
  }
  encode_all_captions(out, list, images, paths, text_dtype, device, settings.sampling.max_text_tokens);

  // ---- phase 2: VAE latents of every clip
  std::vector<std::filesystem::path> videos;
  for (const auto& item : list.videos) videos.push_back(item.video);
  const data::VideoDataset dataset(videos, *data.path, diffusion_common::video_dataset_options(data));
  auto vae = models::load_autoencoder_kl(paths.vae);
  for (auto& param : vae->parameters()) param.set_requires_grad(false);
  vae->to(device);
  int64_t written = 0, kept = 0;
  const int64_t report_every = std::max<int64_t>(1, dataset.size() / 10);
  for (int64_t index = 0; index < dataset.size(); ++index) {
    for (int64_t clip = 0; clip < request.clips_per_video; ++clip) {
      const auto file = diffusion_common::clip_file(out, index, clip, request.clips_per_video);
      if (std::filesystem::exists(file)) {
        ++kept;
        continue;
      }
      // Each clip's crop, flip and posterior sample come from (seed, video, clip): a rerun writes the same files.
      const uint64_t clip_seed = run.seed * 1000003ULL + static_cast<uint64_t>(index) * 64 + static_cast<uint64_t>(clip);
      std::mt19937_64 generator(clip_seed);
      const auto example = dataset.get(index, generator);
      if (example.index != index) break;  // unreadable and skipped (logged and counted by the dataset)
      at::Generator noise = at::detail::createCPUGenerator(clip_seed);
      const auto latent = vae->encode_frames(example.video.unsqueeze(0).to(device), settings.model.vae_chunk_frames,
                                             models::LatentSampling::kSample, noise);
      data::save_latent(file, latent[0], index);
      ++written;
    }
    if ((index + 1) % report_every == 0 || index + 1 == dataset.size()) {
      log::info("  {}/{} videos ({} clip files written, {} kept from before)", index + 1, dataset.size(), written, kept);
    }
  }
  if (images) encode_joined_images(out, *images, *vae, data, run.seed, device);
  manifest.videos = dataset.size() - dataset.skipped_count();
  manifest.complete = true;
  diffusion_common::write_latent_manifest(out, manifest);
  log::info("done: {} clip files and {} captions in {} ({} videos skipped); train from them with data.latents={}",
            written + kept, list.videos.size(), out.string(), dataset.skipped_count() + list.skipped, out.string());
  return 0;
}

}  // namespace tune::recipes::latte_t2v
