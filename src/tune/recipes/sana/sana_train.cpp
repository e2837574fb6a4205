// `tune train` for Sana: the transformer of a diffusers SanaPipeline fine-tuned (full, or LoRA on its attention
// projections) on captioned images that `tune prepare` turned into DC-AE latents and Gemma 2 caption embeddings, by
// the diffusion recipes' one loop (recipes/diffusion/diffusion_train.h) with the official trainer's objective: flow
// matching, x_t = (1 - sigma) x0 + sigma eps, the target eps - x0, an unweighted MSE, sigmas shifted by flow.shift
// (3.0) and drawn logit-normal. The caption is dropped to the empty prompt's embedding with probability
// data.caption_dropout (what classifier-free guidance's unconditional branch sees). Checkpoints hold the transformer
// under diffusers' names and its config.json; a LoRA checkpoint is also a PEFT adapter and a diffusers LoRA file
// (SanaPipeline.load_lora_weights(CHECKPOINT)).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/threads.h"
#include "tune/diffusion/scheduler_config.h"
#include "tune/io/weights.h"
#include "tune/models/dc_ae.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/cpu_kernel_choice.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/diffusion/captioned_latents.h"
#include "tune/recipes/diffusion/diffusers_transformer.h"
#include "tune/recipes/diffusion/diffusion_train.h"
#include "tune/recipes/diffusion/training_latents.h"
#include "tune/recipes/diffusion/latent_manifest.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/run_directory.h"
#include "tune/recipes/sana/sana_memory_report.h"
#include "tune/recipes/sana/sana_model.h"
#include "tune/recipes/sana/sana_recipe.h"
#include "tune/recipes/sana/sana_training_sizes.h"

namespace tune::recipes::sana {
namespace {

struct PreparedData {
  diffusion_common::LatentManifest manifest;
  std::shared_ptr<const diffusion_common::ClipSource> clips;
  diffusion_common::CaptionTensors null_caption;
  std::vector<diffusion::BinnedSize> sizes;  // the latents' pixel sizes (each once); clip group = index here
  diffusion::BinnedSize largest;             // the most pixels of those the data uses: the memory estimate's shape
};

// "1024x1024: 12, 768x1344: 5, ..." (width x height, as image sizes are said) over the buckets that hold clips.
std::string describe_buckets(const PreparedData& prepared) {
  std::vector<int64_t> counts(prepared.sizes.size(), 0);
  for (int64_t index = 0; index < prepared.clips->size(); ++index) {
    ++counts[static_cast<size_t>(prepared.clips->group(index))];
  }
  std::vector<std::string> parts;
  for (size_t group = 0; group < counts.size(); ++group) {
    if (counts[group] > 0) {
      const auto& size = prepared.sizes[group];
      parts.push_back(fmt::format("{}x{}: {}", size.width, size.height, counts[group]));
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// data.latents as `tune prepare` wrote them, checked against the recipe, the pipeline's DC-AE and the transformer.
PreparedData open_prepared_data(const SanaSettings& settings, const SanaComponents& paths,
                                const models::SanaConfig& transformer, const config::Config& config) {
  const auto vae = models::load_autoencoder_dc_config(paths.vae);
  const int64_t factor = vae.spatial_compression_ratio();
  PreparedData prepared;
  prepared.sizes = distinct_sizes(sana_training_sizes(settings.data, factor, transformer.patch_size, config));
  const auto& data = settings.data;
  if (!data.latents) {
    config.fail("data.latents", "or data.path is required: Sana training reads the latents and caption embeddings "
                                "that `tune prepare` writes from data.path (without data.latents, into the run "
                                "directory first), so that neither Gemma 2 nor DC-AE is in memory");
  }
  const std::filesystem::path directory = *data.latents;
  if (!std::filesystem::exists(directory)) {
    config.fail("data.latents", fmt::format("names '{}', which does not exist; run `tune prepare` first", directory.string()));
  }
  auto& manifest = prepared.manifest;
  manifest = diffusion_common::read_latent_manifest(directory);
  const std::string source = (directory / diffusion_common::kLatentManifestName).string();
  if (!manifest.complete) {
    throw InputError(fmt::format("{}: the preparation did not finish; run `tune prepare` again to complete it", source));
  }
  if (!manifest.text) {
    throw InputError(fmt::format("{}: these latents have no captions (class-conditional Latte's); prepare captioned "
                                 "images with recipe sana", source));
  }
  if (manifest.num_frames != 1) {
    throw InputError(fmt::format("{}: these are video latents ({} frames); Sana trains on images (prepare them with "
                                 "recipe sana)", source, manifest.num_frames));
  }
  diffusion_common::VideoDataSettings as_clips;  // an image is a clip of one frame, uncut and unflipped
  as_clips.num_frames = 1;
  as_clips.frame_interval = 1;
  as_clips.image_size = data.image_size;
  as_clips.flip = false;
  if (manifest.aspect_ratio_buckets != data.aspect_ratio_buckets) {
    config.fail("data.aspect_ratio_buckets",
                fmt::format("is {} but the latents in {} were prepared {} (see {}); prepare them again with this "
                            "recipe or set data.aspect_ratio_buckets: {}", data.aspect_ratio_buckets,
                            directory.string(), manifest.aspect_ratio_buckets ? "at aspect-ratio buckets" : "square",
                            source, manifest.aspect_ratio_buckets));
  }
  diffusion_common::check_latents_match(manifest, directory, as_clips, "model.vae", paths.vae.string(),
                                        {vae.latent_channels, vae.spatial_compression_ratio(), vae.scaling_factor, 0.0},
                                        config);
  if (manifest.text->channels != transformer.caption_channels) {
    throw InputError(fmt::format("{}: the captions were encoded to {} channels, the transformer ({}) takes {} "
                                 "(caption_channels)", source, manifest.text->channels, paths.transformer.string(),
                                 transformer.caption_channels));
  }
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& size : prepared.sizes) {
    shapes.push_back({1, manifest.latent_channels, size.height / factor, size.width / factor});
  }
  prepared.clips = diffusion_common::captioned_latent_clips(directory, std::move(shapes), manifest.text->max_tokens,
                                                            manifest.text->channels, data.skip_bad_images);
  std::vector<diffusion::BinnedSize> present;
  std::vector<bool> seen(prepared.sizes.size(), false);
  for (int64_t index = 0; index < prepared.clips->size(); ++index) {
    seen[static_cast<size_t>(prepared.clips->group(index))] = true;
  }
  for (size_t group = 0; group < seen.size(); ++group) {
    if (seen[group]) present.push_back(prepared.sizes[group]);
  }
  prepared.largest = largest_training_size(present);
  prepared.null_caption = diffusion_common::load_caption(directory / diffusion_common::kNullCaptionName,
                                                         manifest.text->max_tokens, manifest.text->channels);
  return prepared;
}

}  // namespace

int train(const TrainRequest& request) {
  // ---- checks
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  TrainingSettings training = read_training_settings(config);
  SanaSettings settings = read_sana_settings(config);
  validate_sana_config(config);
  const SanaComponents paths = resolve_sana_components(settings.model);
  const auto scheduler_file = paths.scheduler / "scheduler_config.json";
  if (!diffusion::read_scheduler_config(scheduler_file).flow()) {
    throw InputError(fmt::format("{}: Sana trains a flow velocity; this scheduler config is not a flow-matching one",
                                 scheduler_file.string()));
  }
  const auto transformer_config_file = paths.transformer / "config.json";
  const auto transformer_config = models::read_sana_config(transformer_config_file);  // checked before any data
  if (transformer_config.out_channels != transformer_config.in_channels) {
    throw InputError(fmt::format("{}: out_channels {} with in_channels {}: training predicts the velocity only (a "
                                 "learned variance is not implemented for Sana)", transformer_config_file.string(),
                                 transformer_config.out_channels, transformer_config.in_channels));
  }

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

  models::Sana model = load_sana_transformer(transformer_config_file, paths.transformer, settings.lora);
  diffusion_common::train_adapters_only(*model, settings.lora, run.frozen_weights_bf16);
  model->to(device);
  const auto& manifest = prepared.manifest;
  const int64_t tokens = manifest.text->max_tokens;
  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  const int64_t factor = manifest.image_size / manifest.latent_size;
  const int64_t latent_height = prepared.largest.height / factor, latent_width = prepared.largest.width / factor;
  choose_cpu_kernels(sana_workload(transformer_config, training.batch_size, latent_height, latent_width, tokens,
                                   compute_dtype, /*training=*/true),
                     device);

  // ---- the transformer as the shared loop trains it
  diffusion_common::DiffusionTrainee trainee;
  trainee.model = model.ptr();
  trainee.description = fmt::format(
      "SanaTransformer2DModel {} blocks, hidden {}, patch {}, caption {} x {}; images {} -> {} latent channels at "
      "1/{} the size", transformer_config.num_layers, transformer_config.inner_dim(), transformer_config.patch_size,
      tokens, manifest.text->channels,
      manifest.aspect_ratio_buckets ? fmt::format("at aspect-ratio buckets ({})", describe_buckets(prepared))
                                    : fmt::format("{}x{}", manifest.image_size, manifest.image_size),
      manifest.latent_channels, factor);
  trainee.blocks = model->blocks();
  trainee.block_types.assign(static_cast<size_t>(model->num_blocks()), models::SanaImpl::block_type());
  trainee.default_block_types = {models::SanaImpl::block_type()};
  trainee.block_type_aliases = {{"SanaMSBlock", models::SanaImpl::block_type()}};  // the official FSDP wrap class
  trainee.set_block_runner = [&](std::shared_ptr<nn::BlockRunner> runner) { model->set_block_runner(std::move(runner)); };
  trainee.learned_sigma = false;
  trainee.condition_dropout = settings.data.caption_dropout;
  const auto null_text = prepared.null_caption.text.to(device);
  const auto null_mask = prepared.null_caption.mask.to(device);
  const double timestep_scale = transformer_config.timestep_scale;
  trainee.forward = [&](const torch::Tensor& x, const torch::Tensor& t, const diffusion_common::Conditioning& condition,
                        const torch::Tensor& drop) {
    const auto [text, mask] = diffusion_common::drop_captions(condition, drop, null_text, null_mask);
    // The loop's clips are [B, 1, C, h, w]; the model takes [B, C, h, w] and SanaPipeline's t * timestep_scale.
    const auto model_t = timestep_scale == 1.0 ? t : t.to(torch::kFloat64) * timestep_scale;
    return model->forward(x.select(1, 0), model_t, text, mask).unsqueeze(1);
  };
  SanaActivationShape shape;
  shape.batch = training.batch_size;
  shape.latent_height = latent_height;  // the largest bucket: where the step peaks
  shape.latent_width = latent_width;
  shape.text_tokens = tokens;
  shape.compute_bytes = run.mixed_precision == precision::MixedPrecision::no ? 4 : 2;
  shape.training_loss = true;
  trainee.activation_estimate = [&](const memory::CheckpointRunner& runner) {
    return sana_activation_estimate(transformer_config, shape, device.type(), compute_dtype, runner);
  };
  diffusion_common::set_checkpoint_files(trainee, *model, model->has_lora(), transformer_config_file, settings.lora,
                                         settings.model.path.value_or(paths.transformer.string()), /*diffusers_lora_file=*/true);

  const diffusion_common::DiffusionTrainingData data{
      prepared.clips, {},
      fmt::format("{} prepared images from {} (caption dropout {}); neither Gemma 2 nor DC-AE in memory",
                  prepared.clips->size(), *settings.data.latents, settings.data.caption_dropout)};
  diffusion_common::DiffusionLoopSettings loop;
  loop.objective = diffusion_common::DiffusionObjectiveKind::flow_matching;
  loop.flow = settings.flow;
  loop.num_timesteps = settings.flow.num_train_timesteps;
  loop.ema_decay = settings.ema_decay;
  loop.clip_start_step = settings.clip_start_step;
  loop.threads = threads;
  log::info("objective: flow matching (velocity eps - x0, unweighted MSE), sigmas shifted by {} and drawn {}",
            settings.flow.flow_shift, config.get_string("flow.weighting"));
  return diffusion_common::run_diffusion_training(request, run, training, loop, trainee, data);
}

}  // namespace tune::recipes::sana
