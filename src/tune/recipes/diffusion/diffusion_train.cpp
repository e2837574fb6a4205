// The video-diffusion training loop, top to bottom: setup -> what one step is -> the step loop.
// One step as Latte's train.py: clips -> (VAE latents) -> uniform timesteps -> hybrid diffusion loss -> backward ->
// clip (from clip_start_step) -> AdamW -> EMA update; for flow matching (Sana's official trainer) the timesteps come
// from the objective's density and the loss is the velocity's MSE.
#include "tune/recipes/diffusion/diffusion_train.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <optional>
#include <utility>

#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/diffusion/gaussian_diffusion.h"
#include "tune/diffusion/sampler.h"
#include "tune/diffusion/timestep_sampler.h"
#include "tune/io/safetensors.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/diffusion/diffusion_checkpoint.h"
#include "tune/recipes/gradient_storage.h"
#include "tune/recipes/step_loop.h"
#include "tune/train/optimizer_step.h"

namespace tune::recipes::diffusion_common {

int run_diffusion_training(const TrainRequest& request, const RunSettings& run, TrainingSettings training,
                           const DiffusionLoopSettings& settings, DiffusionTrainee& trainee,
                           const DiffusionTrainingData& data) {
  const config::Config& config = request.config;
  const torch::Device device(run.device);
  auto& model = *trainee.model;
  const auto num_blocks = static_cast<int64_t>(trainee.blocks.size());
  auto checkpointing = std::make_shared<memory::CheckpointRunner>(run.checkpointing, num_blocks);
  trainee.set_block_runner(checkpointing);
  model.train();

  std::vector<train::NamedParameter> params;
  std::vector<torch::Tensor> param_tensors;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params.push_back({item.key(), item.value()});
    param_tensors.push_back(item.value());
  }
  std::vector<torch::Tensor> model_tensors;
  for (const auto& tensor : model.parameters()) model_tensors.push_back(tensor);
  for (const auto& tensor : model.buffers()) model_tensors.push_back(tensor);
  ModelBlocks blocks{trainee.blocks, trainee.block_types, trainee.default_block_types, {}, trainee.block_type_aliases};
  for (const auto& item : model.named_parameters()) blocks.named_parameters.emplace_back(item.key(), item.value());
  DataParallel parallel(config, model_tensors, param_tensors, &blocks);
  trainee.set_block_runner(parallel.block_runner(checkpointing));

  // Global batches (every rank's clips), with timesteps, noise and condition dropout drawn for the whole global
  // batch on every rank: each rank trains on its rows, and the run does not depend on the number of processes.
  ClipBatcher batcher(data.clips, training.batch_size * parallel.size(), run.seed);
  diffusion::DiffusionOptions diffusion_options;
  diffusion_options.noise_schedule = settings.beta_schedule;
  diffusion_options.diffusion_steps = settings.num_timesteps;
  diffusion_options.process.var_type =
      trainee.learned_sigma ? diffusion::ModelVarType::LearnedRange : diffusion::ModelVarType::FixedLarge;
  const auto diffusion = diffusion::create_diffusion(diffusion_options);
  const diffusion::UniformTimestepSampler timesteps(settings.num_timesteps);
  std::optional<diffusion::FlowMatchingObjective> flow;
  if (settings.objective == DiffusionObjectiveKind::flow_matching) flow.emplace(settings.flow);
  at::Generator noise_generator = at::detail::createCPUGenerator(run.seed + 1);

  // Under shard_grad_op this process's optimizer holds its share of the parameters only; the EMA stays whole
  // (every rank holds every updated parameter after DataParallel::after_update).
  // Under full_shard both hold this process's flat shards.
  train::AdamW optimizer(parallel.optimizer_groups(params, training.weight_decay), training.adamw);
  train::ExponentialMovingAverage ema(parallel.ema_parameters(params), settings.ema_decay);
  std::unique_ptr<precision::DynamicLossScaler> scaler;
  if (run.mixed_precision == precision::MixedPrecision::fp16) {
    scaler = std::make_unique<precision::DynamicLossScaler>(run.loss_scale);
  }
  training.schedule.total_steps = training.total_steps(batcher.batches_per_epoch());
  const std::unique_ptr<train::CompactGradients> compact_gradients =
      make_compact_gradients(config, training, run, param_tensors, {parallel.active(), scaler != nullptr});
  bool held_gradients_said = false;

  TrainerProgress state;
  DiffusionTrainingObjects objects{&model, trainee.save_config, trainee.load_weights, &optimizer, &ema,
                                   &noise_generator, trainee.save_trainable_only};
  std::vector<std::pair<std::string, torch::Tensor>> ema_whole_state;  // full_shard: gathered before each save
  if (parallel.fully_sharded()) {
    objects.ema_whole_state = &ema_whole_state;
    objects.ema_shard_state = [&](const auto& whole) { return parallel.shard_state(whole); };
    objects.read_optimizer = [&](const auto& dir) { return parallel.read_sharded_optimizer_state(dir); };
  }
  if (request.resume_from) {
    parallel.gather_parameters();  // full_shard: the weights load into whole parameters, then re-shard
    state = read_diffusion_checkpoint(*request.resume_from, objects);
    parallel.reshard_parameters();
    batcher.restore(state.loader);
    if (scaler && state.loss_scale > 0) scaler->restore(state.loss_scale, state.loss_scale_clean_steps, state.skipped_steps);
    log::info("resumed from {} at step {}", request.resume_from->string(), state.step);
  }

  // ---- say what is active
  int64_t param_bytes = 0, trainable_bytes = 0;
  double parameter_count = 0;
  for (const auto& item : model.parameters()) {
    param_bytes += item.numel() * static_cast<int64_t>(item.element_size());
    parameter_count += static_cast<double>(item.numel());
    if (item.requires_grad()) trainable_bytes += item.numel() * static_cast<int64_t>(item.element_size());
  }
  // Per process: under full_shard its flat shards.
  param_bytes = parallel.bytes_per_process(param_bytes, false);
  trainable_bytes = parallel.bytes_per_process(trainable_bytes, true);
  // ema.decay 0: the average is the weights themselves, aliased, not copied (train/ema.h).
  const int64_t ema_bytes = ema.copy_bytes() == 0 ? 0 : trainable_bytes;
  log::info("model: {}, {} parameters; training data: {}; device {}, {} threads", trainee.description,
            format_count(parameter_count), data.description, run.device, settings.threads);
  if (parallel.active()) {
    log::info("data parallel: {}; batch {} per process, {} in all", parallel.describe(), training.batch_size,
              training.batch_size * parallel.size());
  }
  log::info("gradient checkpointing: {}", checkpointing->describe());
  log::info("mixed precision: {}", run.mixed_precision == precision::MixedPrecision::no
                                       ? std::string("off (fp32)")
                                       : precision::to_string(run.mixed_precision) + " autocast, fp32 master weights");
  const int64_t activation_estimate = trainee.activation_estimate ? trainee.activation_estimate(*checkpointing) : -1;
  // Held as exact bf16 copies under training.compact_gradients: half (as tune plan counts them; every gradient of
  // these models fits, the first step's log line says how many did).
  const int64_t gradient_bytes = compact_gradients ? trainable_bytes / 2 : trainable_bytes;
  log::info("memory plan: parameters {}, gradients {}{}, optimizer state {}, EMA {}, activations {} for batch {}",
            format_bytes(param_bytes), format_bytes(gradient_bytes), compact_gradients ? " (bf16 copies)" : "",
            format_bytes(optimizer.state_bytes()),
            ema_bytes == 0 ? std::string("none (ema.decay 0: the trained weights)") : format_bytes(ema_bytes),
            activation_estimate >= 0 ? "~" + format_bytes(activation_estimate) : std::string("not estimated"),
            training.batch_size);
  nlohmann::json memory_plan = {{"parameters_bytes", param_bytes},
                                {"gradients_bytes", gradient_bytes},
                                {"optimizer_state_bytes", optimizer.state_bytes()},
                                {"ema_bytes", ema_bytes},
                                {"gradient_checkpointing", checkpointing->describe()},
                                {"compact_gradients", compact_gradients != nullptr},
                                {"mixed_precision", precision::to_string(run.mixed_precision)}};
  if (activation_estimate >= 0) memory_plan["activations_estimate_bytes"] = activation_estimate;

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
      const auto x_start = data.to_model_space ? data.to_model_space(clips.to(device)) : clips.to(device);
      // Timesteps, then noise, drawn on the CPU generator for the global batch and moved: the same noise on every
      // device (a CPU generator cannot fill a CUDA tensor; this line failed on the first CUDA run), then this
      // rank's rows.
      torch::Tensor t, flow_sigma;
      if (flow) {
        const auto flow_draw = flow->draw(global_rows, noise_generator, device).rows(rows.begin, rows.end);
        t = flow_draw.model_timesteps;
        flow_sigma = flow_draw.sigma;
      } else {
        t = timesteps.sample(global_rows, noise_generator, device).timesteps.slice(0, rows.begin, rows.end);
      }
      auto global_shape = x_start.sizes().vec();
      global_shape[0] = global_rows;
      const auto noise = diffusion::standard_normal(global_shape, noise_generator, x_start.options())
                             .slice(0, rows.begin, rows.end);
      const Conditioning condition = global.condition.rows(rows.begin, rows.end).to(device);
      // Condition dropout (classifier-free guidance), drawn like the timesteps and noise: per global row from the
      // step's generator, then this rank's rows, so which rows lose their condition does not depend on the process
      // count.
      torch::Tensor drop;
      if (trainee.condition_dropout > 0) {
        drop = (torch::rand({global_rows}, noise_generator, torch::kFloat) < trainee.condition_dropout)
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
          return trainee.forward(x, t, condition, drop);
        };
        // This rank's share of the mean over the global batch (the plain mean in a single process).
        torch::Tensor per_sample;
        if (flow) {
          const auto pair = diffusion::flow_matching_pair(x_start, noise, flow_sigma);
          per_sample = diffusion::flow_matching_loss_per_sample(model_fn(pair.noisy, t), pair.target);
        } else {
          per_sample = diffusion.training_losses(model_fn, x_start, t, noise).loss;
        }
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
    if (compact_gradients) {
      // Measured, per step (metrics.jsonl): what the held copies take now, before the update drops them.
      result.metrics.emplace_back("gradients_held_bytes", static_cast<double>(compact_gradients->held_bytes()));
      if (!std::exchange(held_gradients_said, true)) {
        log::info("{}", describe_held_gradients(*compact_gradients, param_tensors));
      }
    }
    const double clip = step >= settings.clip_start_step ? training.clip_grad_norm : 0.0;
    const auto outcome =
        train::finish_step(parallel.gradient_tensors(param_tensors), optimizer, scaler.get(), clip, result.lr,
                           std::isfinite(result.loss), parallel.gradient_norm_sum(), compact_gradients.get());
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
    write_diffusion_checkpoint(dir, objects, state, parallel.shards_optimizer_state());
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

  const StepLoopSettings loop = make_step_loop_settings(training, request.output_dir, "samples", device.is_cuda());
  return run_step_loop(loop, hooks, {state.step, state.elapsed_s}, memory_plan);
}

}  // namespace tune::recipes::diffusion_common
