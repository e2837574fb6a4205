// `tune train` for the Latte recipe, top to bottom: checks -> setup -> what one step is -> the step loop.
// One step as Latte's train.py: clips -> (VAE latents) -> uniform timesteps -> hybrid diffusion loss -> backward ->
// clip (from training.clip_start_step) -> AdamW -> EMA update.
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/diffusion/gaussian_diffusion.h"
#include "tune/diffusion/sampler.h"
#include "tune/diffusion/timestep_sampler.h"
#include "tune/io/safetensors.h"
#include "tune/memory/checkpoint.h"
#include "tune/nn/attention_core.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/latte/latte_checkpoint.h"
#include "tune/recipes/latte/latte_data.h"
#include "tune/recipes/latte/latte_latents.h"
#include "tune/recipes/latte/latte_memory_report.h"
#include "tune/recipes/latte/latte_model.h"
#include "tune/recipes/latte/latte_recipe.h"
#include "tune/recipes/run_directory.h"
#include "tune/recipes/step_loop.h"
#include "tune/train/optimizer_step.h"

namespace tune::recipes::latte {
namespace {

struct TrainingData {
  std::shared_ptr<const ClipSource> clips;
  std::vector<std::string> classes;
  bool from_latents = false;
  std::string description;  // for the log
};

// The videos of data.path, or (data.latents) latents written by `tune prepare`, checked against the recipe.
TrainingData open_training_data(const LatteSettings& latte, const config::Config& config) {
  TrainingData result;
  if (!latte.data.latents) {
    auto videos = make_video_dataset(latte);
    result.clips = video_clips(videos);
    result.classes = videos->classes();
    result.description = fmt::format("{} videos in {} classes from {}", videos->size(), result.classes.size(),
                                     *latte.data.path);
    return result;
  }
  const std::filesystem::path directory = *latte.data.latents;
  if (!latte.model.vae) {
    config.fail("model.vae", "is required with data.latents: the VAE the latents were made with gives their geometry "
                             "and decodes samples in tune infer");
  }
  const LatentManifest manifest = read_latent_manifest(directory);
  if (!manifest.complete) {
    throw InputError(fmt::format("{}: the preparation of these latents did not finish; run `tune prepare` again to "
                                 "complete it", (directory / kLatentManifestName).string()));
  }
  check_latents_match(manifest, directory, latte, models::load_autoencoder_kl_config(*latte.model.vae), config);
  auto latents = std::make_shared<const data::LatentDataset>(
      directory, latte.data.skip_bad_videos ? data::OnBadVideo::skip : data::OnBadVideo::fail);
  result.clips = latent_clips(latents, {manifest.num_frames, manifest.latent_channels, manifest.latent_size,
                                        manifest.latent_size});
  result.classes = manifest.classes;
  result.from_latents = true;
  result.description = fmt::format("{} prepared latent clips ({} videos, {} classes) from {}; no VAE in memory",
                                   latents->size(), manifest.videos, result.classes.size(), directory.string());
  return result;
}

}  // namespace

int train(const TrainRequest& request) {
  // ---- checks
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  TrainingSettings training = read_training_settings(config);
  const LatteSettings latte = read_latte_settings(config);
  validate_latte_config(config);
  // The data the recipe names exists, or the error names its key and where it was set (before anything is written).
  for (const auto& [key, path] : {std::pair{"data.path", latte.data.path}, std::pair{"data.latents", latte.data.latents}}) {
    if (path && !std::filesystem::exists(*path)) config.fail(key, fmt::format("names '{}', which does not exist", *path));
  }
  const std::filesystem::path output_dir = request.output_dir;

  // ---- setup
  const int threads = configure_threads(threads_for_this_rank(run.threads));
  memory_tracker::install();
  const torch::Device device(run.device);
  const TrainingData training_data = open_training_data(latte, config);
  run_on_main_rank([&] { prepare_run_directory(output_dir, config, request.resume_from); },
                   "prepare the run directory");

  const int64_t class_count = static_cast<int64_t>(training_data.classes.size());
  LatteParts parts = build_latte(latte, class_count, run.seed,
                                 training_data.from_latents ? VaeUse::geometry_only : VaeUse::load);
  auto& model = parts.model;
  model->to(device);
  // Before the activation estimates: they count the attention core that was chosen.
  choose_cpu_kernels(latte_workload(model->config(), training.batch_size, precision::compute_dtype(run.mixed_precision),
                                    /*training=*/true),
                     device);
  if (parts.vae) (*parts.vae)->to(device);
  auto checkpointing = std::make_shared<memory::CheckpointRunner>(run.checkpointing, model->num_blocks());
  model->set_block_runner(checkpointing);
  model->train();
  if (model->config().class_conditional() && model->config().num_classes < class_count) {
    config.fail("model.num_classes", fmt::format("({}) is smaller than the {} classes of the training data ({})",
                                                 model->config().num_classes, class_count, training_data.description));
  }

  std::vector<train::NamedParameter> params;
  std::vector<torch::Tensor> param_tensors;
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params.push_back({item.key(), item.value()});
    param_tensors.push_back(item.value());
  }
  std::vector<torch::Tensor> model_tensors;
  for (const auto& tensor : model->parameters()) model_tensors.push_back(tensor);
  for (const auto& tensor : model->buffers()) model_tensors.push_back(tensor);
  ModelBlocks blocks{model->blocks(), {}, {}, {}};
  for (int64_t i = 0; i < model->num_blocks(); ++i) blocks.types.emplace_back(models::LatteImpl::block_type(i));
  blocks.default_types = {models::LatteImpl::block_type(0), models::LatteImpl::block_type(1)};
  for (const auto& item : model->named_parameters()) blocks.named_parameters.emplace_back(item.key(), item.value());
  DataParallel parallel(config, model_tensors, param_tensors, &blocks);
  model->set_block_runner(parallel.block_runner(checkpointing));

  // Global batches (every rank's clips), with timesteps and noise drawn for the whole global batch on every rank:
  // each rank trains on its rows, and the run does not depend on the number of processes.
  ClipBatcher batcher(training_data.clips, training.batch_size * parallel.size(), run.seed);
  diffusion::DiffusionOptions diffusion_options;
  diffusion_options.noise_schedule = latte.diffusion.beta_schedule;
  diffusion_options.diffusion_steps = latte.diffusion.num_timesteps;
  diffusion_options.process.var_type =
      model->config().learn_sigma ? diffusion::ModelVarType::LearnedRange : diffusion::ModelVarType::FixedLarge;
  const auto diffusion = diffusion::create_diffusion(diffusion_options);
  const diffusion::UniformTimestepSampler timesteps(latte.diffusion.num_timesteps);
  at::Generator noise_generator = at::detail::createCPUGenerator(run.seed + 1);

  // Under shard_grad_op this process's optimizer holds its share of the parameters only; the EMA stays whole
  // (every rank holds every updated parameter after DataParallel::after_update).
  // Under full_shard both hold this process's flat shards.
  train::AdamW optimizer(parallel.optimizer_groups(params, training.weight_decay), training.adamw);
  train::ExponentialMovingAverage ema(parallel.ema_parameters(params), latte.ema_decay);
  std::unique_ptr<precision::DynamicLossScaler> scaler;
  if (run.mixed_precision == precision::MixedPrecision::fp16) {
    scaler = std::make_unique<precision::DynamicLossScaler>(run.loss_scale);
  }
  training.schedule.total_steps = training.total_steps(batcher.batches_per_epoch());

  LatteTrainerState state;
  LatteTrainingObjects objects{&model, &optimizer, &ema, &noise_generator};
  std::vector<std::pair<std::string, torch::Tensor>> ema_whole_state;  // full_shard: gathered before each save
  if (parallel.fully_sharded()) {
    objects.ema_whole_state = &ema_whole_state;
    objects.ema_shard_state = [&](const auto& whole) { return parallel.shard_state(whole); };
    objects.read_optimizer = [&](const auto& dir) { return parallel.read_sharded_optimizer_state(dir); };
  }
  if (request.resume_from) {
    parallel.gather_parameters();  // full_shard: the weights load into whole parameters, then re-shard
    state = read_latte_checkpoint(*request.resume_from, objects);
    parallel.reshard_parameters();
    batcher.restore(state.loader);
    if (scaler && state.loss_scale > 0) scaler->restore(state.loss_scale, state.loss_scale_clean_steps, state.skipped_steps);
    log::info("resumed from {} at step {}", request.resume_from->string(), state.step);
  }

  // ---- say what is active
  int64_t param_bytes = 0, trainable_bytes = 0;
  double parameter_count = 0;
  for (const auto& item : model->parameters()) {
    param_bytes += item.numel() * static_cast<int64_t>(item.element_size());
    parameter_count += static_cast<double>(item.numel());
    if (item.requires_grad()) trainable_bytes += item.numel() * static_cast<int64_t>(item.element_size());
  }
  // Per process: under full_shard its flat shards.
  param_bytes = parallel.bytes_per_process(param_bytes, false);
  trainable_bytes = parallel.bytes_per_process(trainable_bytes, true);
  const auto& model_config = model->config();
  log::info("model: Latte {} blocks (spatial/temporal alternating), hidden {}, patch {}, {} parameters; input {} x {}x{}x{} "
            "({}); training data: {}; device {}, {} threads",
            model_config.depth, model_config.hidden_size, model_config.patch_size, format_count(parameter_count),
            model_config.num_frames, model_config.in_channels, model_config.input_size, model_config.input_size,
            latte.model.vae ? "VAE latents" : "pixels", training_data.description, run.device, threads);
  if (parallel.active()) {
    log::info("data parallel: {}; batch {} per process, {} in all", parallel.describe(), training.batch_size,
              training.batch_size * parallel.size());
  }
  log::info("gradient checkpointing: {}", checkpointing->describe());
  log::info("mixed precision: {}", run.mixed_precision == precision::MixedPrecision::no
                                       ? std::string("off (fp32)")
                                       : precision::to_string(run.mixed_precision) + " autocast, fp32 master weights");
  // The attention core nn::run_attention_core will take: for plainly run blocks, and for selective's.
  const c10::ScalarType compute_dtype = precision::compute_dtype(run.mixed_precision);
  const LatteActivationShape shape{training.batch_size,
                                   run.mixed_precision == precision::MixedPrecision::no ? 4 : 2,
                                   nn::uses_fused_attention(device.type(), compute_dtype)};
  LatteActivationShape selective_shape = shape;
  selective_shape.fused_attention = nn::uses_fused_attention(device.type(), compute_dtype, /*recomputing=*/true);
  const int64_t activation_estimate = estimate_for_runner(latte_stack(model_config, shape, false),
                                                          latte_stack(model_config, selective_shape, true),
                                                          *checkpointing);
  log::info("memory plan: parameters {}, gradients {}, optimizer state {}, EMA {}, activations ~{} (estimate for "
            "batch {})", format_bytes(param_bytes), format_bytes(trainable_bytes), format_bytes(optimizer.state_bytes()),
            format_bytes(trainable_bytes), format_bytes(activation_estimate), shape.batch);
  const nlohmann::json memory_plan = {{"parameters_bytes", param_bytes},
                                      {"gradients_bytes", trainable_bytes},
                                      {"optimizer_state_bytes", optimizer.state_bytes()},
                                      {"ema_bytes", trainable_bytes},
                                      {"activations_estimate_bytes", activation_estimate},
                                      {"gradient_checkpointing", checkpointing->describe()},
                                      {"mixed_precision", precision::to_string(run.mixed_precision)}};

  // ---- one optimizer step
  StepLoopHooks hooks;
  hooks.step = [&](int64_t step) {
    StepResult result;
    for (int64_t i = 0; i < training.gradient_accumulation_steps; ++i) {
      const ClipBatch global = batcher.next();
      const int64_t global_rows = global.clips.size(0);
      RowRange rows = parallel.share(global_rows);
      // full_shard: a rank without rows still computes (row 0, its loss times zero) to take part in every gather.
      const bool dummy = rows.size() == 0 && parallel.every_rank_computes();
      if (dummy) rows = {0, 1};
      const auto clips = global.clips.slice(0, rows.begin, rows.end);
      // Pixel clips: each rank encodes only its rows, with the VAE's posterior noise from the process's default
      // generator, so a multi-process run is not bitwise the single-process one there (latents from
      // `tune prepare` are; README).
      const auto x_start = training_data.from_latents
                               ? clips.to(device)
                               : to_model_space(parts, clips.to(device), latte.model.vae_chunk_frames);
      const auto draw = timesteps.sample(global_rows, noise_generator, device);
      // Drawn on the CPU generator, then moved: the same noise on every device (a CPU generator cannot fill a CUDA
      // tensor; this line failed on the first CUDA run). Drawn for the global batch, then this rank's rows.
      auto global_shape = x_start.sizes().vec();
      global_shape[0] = global_rows;
      const auto noise = diffusion::standard_normal(global_shape, noise_generator, x_start.options())
                             .slice(0, rows.begin, rows.end);
      const auto t = draw.timesteps.slice(0, rows.begin, rows.end);
      const auto labels = model_config.class_conditional() ? global.labels.slice(0, rows.begin, rows.end).to(device)
                                                           : torch::Tensor();
      // Label dropout (classifier-free guidance), drawn like the timesteps and noise: per global row from the step's
      // generator, then this rank's rows, so which rows lose their class does not depend on the process count.
      torch::Tensor drop_labels;
      if (model_config.class_conditional() && model_config.class_dropout_prob > 0) {
        drop_labels = (torch::rand({global_rows}, noise_generator, torch::kFloat) < model_config.class_dropout_prob)
                          .to(torch::kLong)
                          .slice(0, rows.begin, rows.end)
                          .to(device);
      }
      parallel.before_backward(i + 1 == training.gradient_accumulation_steps);
      parallel.before_forward();
      torch::Tensor loss;
      {
        precision::AutocastScope autocast(run.mixed_precision, device);
        const diffusion::ModelFn model_fn = [&](const torch::Tensor& x, const torch::Tensor& t) {
          return model->forward(x, t, labels, drop_labels);
        };
        // This rank's share of the mean over the global batch (the plain mean in a single process).
        const auto per_sample = diffusion.training_losses(model_fn, x_start, t, noise).loss;
        const auto batch_loss = parallel.active() ? per_sample.sum() / static_cast<double>(global_rows)
                                                  : per_sample.mean();
        loss = batch_loss / static_cast<double>(training.gradient_accumulation_steps);
        if (dummy) loss = loss * 0.0;
      }
      (scaler ? scaler->scale(loss) : loss).backward();
      result.loss += loss.item<double>();
      result.items += static_cast<double>(global_rows);
    }
    parallel.finish_gradients();
    result.resident_bytes = memory_tracker::live_bytes(device.is_cuda());
    result.loss = parallel.sum(result.loss);
    result.lr = training.schedule.at(step);
    const double clip = step >= latte.clip_start_step ? training.clip_grad_norm : 0.0;
    const auto outcome = train::finish_step(parallel.gradient_tensors(param_tensors), optimizer, scaler.get(), clip, result.lr,
                                            std::isfinite(result.loss), parallel.gradient_norm_sum());
    parallel.after_update(outcome.applied);
    if (outcome.applied) ema.update(parallel.ema_parameters(params));
    result.applied = outcome.applied;
    result.grad_norm = outcome.grad_norm;
    if (scaler) {
      result.loss_scale = outcome.loss_scale;
      result.next_loss_scale = scaler->current_scale();
    }
    return result;
  };
  hooks.save = [&](const std::filesystem::path& dir, int64_t step, double elapsed_s) {
    state.step = step;
    state.elapsed_s = elapsed_s;
    state.loader = batcher.position();
    if (scaler) {
      state.loss_scale = scaler->current_scale();
      state.loss_scale_clean_steps = scaler->clean_steps();
      state.skipped_steps = scaler->skipped_steps();
    }
    write_latte_checkpoint(dir, objects, state, parallel.shards_optimizer_state());
  };
  hooks.before_save = [&] {
    parallel.gather_parameters();
    if (parallel.fully_sharded()) ema_whole_state = parallel.whole_state(ema.state());
  };
  hooks.after_save = [&] {
    parallel.release_parameters();
    ema_whole_state.clear();
  };
  if (parallel.shards_optimizer_state()) {
    hooks.save_optimizer_shard = [&](const std::filesystem::path& file,
                                     const std::map<std::string, std::string>& metadata) {
      io::save_safetensors(file, optimizer.state_tensors(), metadata);
    };
  }

  const StepLoopSettings loop = make_step_loop_settings(training, output_dir, "samples", device.is_cuda());
  return run_step_loop(loop, hooks, {state.step, state.elapsed_s}, memory_plan);
}

void validate_latte_config(const config::Config& config) {
  const RunSettings run = read_run_settings(config);
  (void)read_training_settings(config);
  (void)read_distributed_settings(config);
  (void)read_latte_settings(config);
  if (run.frozen_weights_bf16) config.fail("param_dtype", "is 'bf16', but Latte trains every weight; use fp32");
  validate_shard_blocks(config, {models::LatteImpl::block_type(0), models::LatteImpl::block_type(1)});
}

}  // namespace tune::recipes::latte
