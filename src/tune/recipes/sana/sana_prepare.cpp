// `tune prepare` for Sana: the captioned images of data.path -> (1) every caption and the empty prompt through
// Gemma 2, as sampling encodes prompts (sana_prompt.h: the complex human instruction when
// data.complex_human_instruction, the empty prompt without it, as SanaPipeline's negative prompt), then the encoder
// is freed; (2) each image resized and center-cropped to data.image_size (or, with data.aspect_ratio_buckets, to the
// bucket nearest its shape: sana_training_sizes.h) -> DC-AE latents (deterministic: DC-AE has
// no posterior to sample). Written as diffusion/captioned_latents.h lays out (an image is a clip of one frame), with
// latents.json; training with data.latents then loads neither Gemma 2 nor DC-AE. Interrupted runs continue: files
// already written are kept and skipped; a folder holding other latents or anything else is never written into.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/threads.h"
#include "tune/data/captioned_images.h"
#include "tune/data/image_transform.h"
#include "tune/data/tokenizer.h"
#include "tune/data/video_dataset.h"
#include "tune/io/json_file.h"
#include "tune/models/dc_ae.h"
#include "tune/models/gemma2_text_encoder.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/captioned_latents.h"
#include "tune/recipes/diffusion/latent_manifest.h"
#include "tune/recipes/diffusion/training_images.h"
#include "tune/recipes/sana/sana_model.h"
#include "tune/recipes/sana/sana_prompt.h"
#include "tune/recipes/sana/sana_recipe.h"
#include "tune/recipes/sana/sana_training_sizes.h"

namespace tune::recipes::sana {
namespace {

constexpr int64_t kCaptionBatch = 16;  // captions per Gemma 2 call

// Phase 1: the captions not written yet, in batches, and the empty prompt; the encoder is gone on return.
void encode_all_captions(const std::filesystem::path& out, const data::CaptionedImageList& list,
                         const SanaComponents& paths, torch::ScalarType dtype, const torch::Device& device,
                         const SanaSettings& settings) {
  const auto tokenizer = data::Tokenizer::load(paths.tokenizer);
  auto encoder = models::Gemma2TextEncoder::load(paths.text_encoder, dtype);
  encoder.model()->to(device);
  const TextEncoderFn encode = [&](const torch::Tensor& ids, const torch::Tensor& mask) {
    return encoder.forward(ids.to(device), mask.to(device));
  };
  const int64_t tokens = settings.sampling.max_text_tokens;
  const auto instruction = settings.data.complex_human_instruction ? default_complex_human_instruction()
                                                                   : std::vector<std::string>{};
  std::filesystem::create_directories(out / "captions");
  if (!std::filesystem::exists(out / diffusion_common::kNullCaptionName)) {
    const auto null = encode_sana_captions(encode, tokenizer, {""}, tokens, {});
    diffusion_common::save_caption(out / diffusion_common::kNullCaptionName, null.text[0].to(torch::kFloat32).cpu(),
                                   null.mask[0].cpu());
  }
  std::vector<int64_t> pending;
  for (int64_t i = 0; i < static_cast<int64_t>(list.images.size()); ++i) {
    if (!std::filesystem::exists(diffusion_common::caption_file(out, i))) pending.push_back(i);
  }
  for (size_t begin = 0; begin < pending.size(); begin += kCaptionBatch) {
    const size_t end = std::min(pending.size(), begin + kCaptionBatch);
    std::vector<std::string> captions;
    for (size_t k = begin; k < end; ++k) captions.push_back(list.images[static_cast<size_t>(pending[k])].caption);
    const auto embedded = encode_sana_captions(encode, tokenizer, captions, tokens, instruction);
    for (size_t k = begin; k < end; ++k) {
      const auto row = static_cast<int64_t>(k - begin);
      diffusion_common::save_caption(diffusion_common::caption_file(out, pending[k]),
                                     embedded.text[row].to(torch::kFloat32).cpu(), embedded.mask[row].cpu());
    }
  }
  log::info("captions: {} encoded ({} kept from before) with Gemma 2 ({}), {} tokens each{}; text encoder freed",
            pending.size(), list.images.size() - pending.size(), paths.text_encoder.string(), tokens,
            instruction.empty() ? "" : ", with the complex human instruction");
}

// The image as training sees it, [3, h, w] in [-1, 1]: the square, or its aspect-ratio bucket; nullopt when unreadable
// and data.on_bad_image is skip.
std::optional<torch::Tensor> training_pixels(const std::filesystem::path& image, const SanaDataSettings& data,
                                             const std::vector<diffusion::BinnedSize>& sizes) {
  constexpr const char* kSkipSetting = "data.on_bad_image: skip";
  if (!data.aspect_ratio_buckets) {
    return diffusion_common::read_training_image_or_skip(image, data.image_size, data.skip_bad_images, kSkipSetting);
  }
  const auto rgb = diffusion_common::read_decoded_image_or_skip(image, data.skip_bad_images, kSkipSetting);
  if (!rgb) return std::nullopt;
  const auto bucket = diffusion::nearest_bucket(sizes, rgb->size(0), rgb->size(1));
  return data::transform_image_to(*rgb, bucket.height, bucket.width);
}

}  // namespace

int prepare(const PrepareRequest& request) {
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  const SanaSettings settings = read_sana_settings(config);
  validate_sana_config(config);
  const auto& data = settings.data;
  if (request.clips_per_video != 1) {
    throw UsageError("--clips-per-video applies to video recipes; Sana prepares one latent per image");
  }
  if (!request.out && !data.latents) {
    throw UsageError("where should the latents go? pass --out DIR or set data.latents in the recipe");
  }
  const std::filesystem::path out = request.out ? *request.out : std::filesystem::path(*data.latents);
  if (!data.path) config.fail("data.path", "is required: tune prepare encodes the captioned images found there");
  if (!std::filesystem::exists(*data.path)) {
    config.fail("data.path", fmt::format("names '{}', which does not exist", *data.path));
  }
  const SanaComponents paths = resolve_sana_components(settings.model);
  const auto vae_config = models::load_autoencoder_dc_config(paths.vae);
  const int64_t factor = vae_config.spatial_compression_ratio();
  const auto transformer_config = models::read_sana_config(paths.transformer / "config.json");
  const auto sizes = sana_training_sizes(data, factor, transformer_config.patch_size, config);
  const auto text_config_file = paths.text_encoder / "config.json";
  const auto text_config = io::read_json_file(text_config_file, "the text encoder's config");
  if (!text_config.contains("hidden_size") || !text_config.at("hidden_size").is_number_integer()) {
    throw InputError(fmt::format("{}: no integer hidden_size (a Gemma 2 config has one)", text_config_file.string()));
  }

  const int threads = configure_threads(run.threads);
  const torch::Device device(run.device);
  const auto list = data::read_captioned_images(*data.path, data.skip_bad_images ? data::OnBadVideo::skip
                                                                                 : data::OnBadVideo::fail);
  const auto text_dtype = text_encoder_dtype(settings.model.text_encoder_dtype, run.mixed_precision);

  diffusion_common::LatentManifest manifest;
  manifest.videos = static_cast<int64_t>(list.images.size());
  manifest.clips_per_video = 1;
  manifest.num_frames = 1;
  manifest.frame_interval = 1;
  manifest.image_size = data.image_size;
  manifest.flip = false;
  manifest.vae = paths.vae.string();
  manifest.latent_channels = vae_config.latent_channels;
  manifest.latent_size = data.image_size / factor;
  manifest.scaling_factor = vae_config.scaling_factor;
  manifest.shift_factor = 0.0;
  manifest.seed = run.seed;
  manifest.aspect_ratio_buckets = data.aspect_ratio_buckets;
  manifest.text = diffusion_common::TextManifest{
      *data.path, paths.text_encoder.string(), settings.sampling.max_text_tokens,
      text_config.at("hidden_size").get<int64_t>(), text_dtype == torch::kBFloat16 ? "bf16" : "fp32"};
  diffusion_common::check_prepare_output_folder(out, manifest);
  std::filesystem::create_directories(out / "clips");
  diffusion_common::write_latent_manifest(out, manifest);
  log::info("preparing Sana latents: {} captioned images from {} ({} skipped) -> {} ({} -> {} channels at 1/{} "
            "the size; device {}, {} threads)", list.images.size(), *data.path, list.skipped, out.string(),
            data.aspect_ratio_buckets
                ? fmt::format("each at the nearest of {} aspect-ratio buckets of {}", sizes.size(), data.image_size)
                : fmt::format("{}x{}", data.image_size, data.image_size),
            manifest.latent_channels, factor, run.device, threads);

  // ---- phase 1: text (Gemma 2 freed before DC-AE loads)
  encode_all_captions(out, list, paths, text_dtype, device, settings);

  // ---- phase 2: DC-AE latents of every image
  torch::NoGradGuard no_grad;
  auto vae = models::load_autoencoder_dc(paths.vae);
  for (auto& param : vae->parameters()) param.set_requires_grad(false);
  vae->to(device);
  vae->eval();
  int64_t written = 0, kept = 0, unreadable = 0;
  const auto count = static_cast<int64_t>(list.images.size());
  const int64_t report_every = std::max<int64_t>(1, count / 10);
  for (int64_t index = 0; index < count; ++index) {
    const auto file = diffusion_common::clip_file(out, index, 0, 1);
    if (std::filesystem::exists(file)) {
      ++kept;
    } else if (auto pixels = training_pixels(list.images[static_cast<size_t>(index)].image, data, sizes)) {
      const auto latent = vae->encode_latents(pixels->unsqueeze(0).to(device));  // [1, C, h, w]: one frame
      data::save_latent(file, latent.cpu(), index);
      ++written;
    } else {
      ++unreadable;
    }
    if ((index + 1) % report_every == 0 || index + 1 == count) {
      log::info("  {}/{} images ({} latent files written, {} kept from before)", index + 1, count, written, kept);
    }
  }
  manifest.videos = count - unreadable;
  manifest.complete = true;
  diffusion_common::write_latent_manifest(out, manifest);
  log::info("done: {} latent files and {} captions in {} ({} images skipped); train from them with data.latents={}",
            written + kept, list.images.size(), out.string(), unreadable + list.skipped, out.string());
  return 0;
}

}  // namespace tune::recipes::sana
