// `tune train` for text-to-video Latte, which the official repository does not ship: the transformer of a diffusers
// Latte pipeline fine-tuned on captioned clips that `tune prepare` turned into VAE latents and T5 embeddings, by the
// video recipes' shared loop (recipes/diffusion/diffusion_train.h). The training process is the pipeline's
// scheduler config (its betas; epsilon prediction), the loss Latte's (eps MSE plus the variational bound of the
// learned variance), the caption dropped to the empty prompt's embedding with probability data.caption_dropout.
// Checkpoints hold the transformer under diffusers' names and its config.json, so sampling from a run uses them in
// place of the pipeline's transformer.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/threads.h"
#include "tune/diffusion/scheduler_config.h"
#include "tune/io/weights.h"
#include "tune/models/latte_t2v.h"
#include "tune/models/vae.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/cpu_kernel_choice.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/diffusion/diffusion_train.h"
#include "tune/recipes/diffusion/training_latents.h"
#include "tune/recipes/diffusion/latent_manifest.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/diffusion/captioned_latents.h"
#include "tune/recipes/latte_t2v/t2v_memory_report.h"
#include "tune/recipes/diffusion/diffusers_transformer.h"
#include "tune/recipes/latte_t2v/t2v_model.h"
#include "tune/recipes/latte_t2v/t2v_pipeline.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/run_directory.h"

namespace tune::recipes::latte_t2v {
namespace {

struct PreparedData {
  diffusion_common::LatentManifest manifest;
  std::shared_ptr<const diffusion_common::ClipSource> clips;
  diffusion_common::CaptionTensors null_caption;
  int64_t image_count = 0;  // prepared images that data.use_image_num draws from
};

// data.latents as `tune prepare` wrote them, checked against the recipe and the pipeline's VAE and transformer.
PreparedData open_prepared_data(const T2VSettings& settings, const ComponentPaths& paths,
                                const models::LatteT2VConfig& transformer, const config::Config& config) {
  if (!settings.data.latents) {
    config.fail("data.latents", "or data.path is required: text-to-video training reads the latents and caption "
                                "embeddings that `tune prepare` writes from data.path (without data.latents, into the "
                                "run directory first), so that neither T5 nor the VAE is in memory");
  }
  const std::filesystem::path directory = *settings.data.latents;
  if (!std::filesystem::exists(directory)) {
    config.fail("data.latents", fmt::format("names '{}', which does not exist; run `tune prepare` first", directory.string()));
  }
  PreparedData prepared;
  auto& manifest = prepared.manifest;
  manifest = diffusion_common::read_latent_manifest(directory);
  const std::string source = (directory / diffusion_common::kLatentManifestName).string();
  if (!manifest.complete) {
    throw InputError(fmt::format("{}: the preparation did not finish; run `tune prepare` again to complete it", source));
  }
  if (!manifest.text) {
    throw InputError(fmt::format("{}: these latents have no captions (class-conditional Latte's); prepare captioned "
                                 "videos with recipe latte_t2v", source));
  }
  diffusion_common::check_latents_match(manifest, directory, settings.data, "model.vae", paths.vae.string(),
                                        models::load_autoencoder_kl_config(paths.vae), config);
  if (manifest.text->channels != transformer.caption_channels) {
    throw InputError(fmt::format("{}: the captions were encoded to {} channels, the transformer ({}) takes {} "
                                 "(caption_channels)", source, manifest.text->channels, paths.transformer.string(),
                                 transformer.caption_channels));
  }
  prepared.clips = diffusion_common::captioned_latent_clips(
      directory, {{manifest.num_frames, manifest.latent_channels, manifest.latent_size, manifest.latent_size}},
      manifest.text->max_tokens, manifest.text->channels, settings.data.skip_bad_videos);
  const int64_t images = settings.data.use_image_num;
  if (images > 0) {
    if (manifest.images != settings.data.images) {
      config.fail("data.images", fmt::format("is '{}' but the latents in {} were prepared {}; run `tune prepare` with "
                                             "this recipe into a new folder", *settings.data.images, directory.string(),
                                             manifest.images ? "with the images of '" + *manifest.images + "'"
                                                             : std::string("without images")));
    }
    const auto joined = diffusion_common::captioned_latent_clips(
        directory / diffusion_common::kJoinedImagesFolder,
        {{1, manifest.latent_channels, manifest.latent_size, manifest.latent_size}}, manifest.text->max_tokens,
        manifest.text->channels, settings.data.skip_bad_videos);
    if (joined->size() == 0) {
      throw InputError(fmt::format("{}: no prepared image latents for data.use_image_num",
                                   (directory / diffusion_common::kJoinedImagesFolder).string()));
    }
    prepared.image_count = joined->size();
    prepared.clips = diffusion_common::join_images(prepared.clips, joined, images);
  }
  prepared.null_caption = diffusion_common::load_caption(directory / diffusion_common::kNullCaptionName, manifest.text->max_tokens,
                                       manifest.text->channels);
  return prepared;
}

}  // namespace

int train(const TrainRequest& request) {
  // ---- checks
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  TrainingSettings training = read_training_settings(config);
  T2VSettings settings = read_t2v_settings(config);
  validate_t2v_config(config);
  const ComponentPaths paths = resolve_components(settings.model);
  const auto scheduler = diffusion::read_scheduler_config(paths.scheduler / "scheduler_config.json");
  if (scheduler.prediction_type != "epsilon") {
    throw InputError(fmt::format("{}: prediction_type '{}': training predicts epsilon only (not implemented yet for "
                                 "other targets)", (paths.scheduler / "scheduler_config.json").string(),
                                 scheduler.prediction_type));
  }
  const auto transformer_config_file = paths.transformer / "config.json";
  const auto transformer_config = models::read_latte_t2v_config(transformer_config_file);  // checked before any data

  // ---- setup
  const int threads = configure_threads(threads_for_this_rank(run.threads));
  // Without data.latents, tune prepare's work into the run directory first (diffusion/training_latents.h).
  if (const auto latents =
          diffusion_common::training_latents(request, settings.data.latents, settings.data.path, prepare)) {
    settings.data.latents = latents->string();
  }
  memory_tracker::install();
  const torch::Device device(run.device);
  const PreparedData prepared = open_prepared_data(settings, paths, transformer_config, config);
  run_on_main_rank([&] { prepare_run_directory(request.output_dir, config, request.resume_from); },
                   "prepare the run directory");

  models::LatteT2V model = load_transformer(transformer_config_file, paths.transformer, settings.lora);
  diffusion_common::train_adapters_only(*model, settings.lora, run.frozen_weights_bf16);
  model->to(device);
  const auto& manifest = prepared.manifest;
  choose_cpu_kernels(latte_t2v_workload(transformer_config, training.batch_size,
                                        manifest.num_frames + settings.data.use_image_num, manifest.latent_size,
                                        manifest.latent_size, manifest.text->max_tokens,
                                        precision::compute_dtype(run.mixed_precision), /*training=*/true),
                     device);

  // ---- the transformer as the shared loop trains it
  diffusion_common::DiffusionTrainee trainee;
  trainee.model = model.ptr();
  trainee.description = fmt::format(
      "LatteTransformer3DModel {} spatial + {} temporal blocks, hidden {}, patch {}, caption {} x {}; clips {} x "
      "{}x{}x{} latents", transformer_config.num_layers, transformer_config.num_layers, transformer_config.inner_dim(),
      transformer_config.patch_size, manifest.text->max_tokens, manifest.text->channels, manifest.num_frames,
      manifest.latent_channels, manifest.latent_size, manifest.latent_size);
  trainee.blocks = model->blocks();
  for (int64_t i = 0; i < model->num_blocks(); ++i) trainee.block_types.emplace_back(models::LatteT2VImpl::block_type(i));
  trainee.default_block_types = {models::LatteT2VImpl::block_type(0), models::LatteT2VImpl::block_type(1)};
  trainee.set_block_runner = [&](std::shared_ptr<nn::BlockRunner> runner) { model->set_block_runner(std::move(runner)); };
  trainee.learned_sigma = transformer_config.learned_sigma();
  trainee.condition_dropout = settings.data.caption_dropout;
  const int64_t image_frames = settings.data.use_image_num;
  const auto null_text = prepared.null_caption.text.to(device);
  const auto null_mask = prepared.null_caption.mask.to(device);
  trainee.forward = [&](const torch::Tensor& x, const torch::Tensor& t, const diffusion_common::Conditioning& condition,
                        const torch::Tensor& drop) {
    const auto [text, mask] = diffusion_common::drop_captions(condition, drop, null_text, null_mask);
    return model->forward(x, t, text, mask, /*temporal_attention=*/true, image_frames);
  };
  // The estimate counts full fine-tuning (LoRA keeps about as much: the adapters' inputs are the frozen layers' own).
  // Joined images are counted as frames: an upper bound, the temporal blocks skip them.
  const T2VActivationShape shape{training.batch_size, manifest.num_frames + image_frames, manifest.latent_size,
                                 manifest.latent_size,
                                 manifest.text->max_tokens, run.mixed_precision == precision::MixedPrecision::no ? 4 : 2,
                                 /*training_loss=*/true};
  trainee.activation_estimate = [&](const memory::CheckpointRunner& runner) {
    return t2v_activation_estimate(transformer_config, shape, device.type(),
                                   precision::compute_dtype(run.mixed_precision), runner);
  };
  diffusion_common::set_checkpoint_files(trainee, *model, model->has_lora(), transformer_config_file, settings.lora,
                                         settings.model.path.value_or(paths.transformer.string()), /*diffusers_lora_file=*/false);

  const diffusion_common::DiffusionTrainingData data{
      prepared.clips, {},
      fmt::format("{} prepared clips of {} captioned videos from {} (caption dropout {}){}; neither T5 nor the VAE in "
                  "memory", prepared.clips->size(), manifest.videos, *settings.data.latents,
                  settings.data.caption_dropout,
                  image_frames == 0
                      ? std::string()
                      : fmt::format(", each joined by {} of {} captioned images (use_image_num: they train the "
                                    "spatial blocks only)", image_frames, prepared.image_count))};
  diffusion_common::DiffusionLoopSettings loop;
  loop.betas = diffusion::scheduler_betas(scheduler);
  loop.num_timesteps = static_cast<int64_t>(loop.betas.size());
  loop.ema_decay = settings.ema_decay;
  loop.clip_start_step = settings.clip_start_step;
  loop.threads = threads;
  return diffusion_common::run_diffusion_training(request, run, training, loop, trainee, data);
}

}  // namespace tune::recipes::latte_t2v
