// `tune train` for the SFT recipe, top to bottom: checks -> setup -> step loop -> final checkpoint.
#include <chrono>
#include <cmath>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/loss_plot.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/metrics_writer.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/data/sft_loader.h"
#include "tune/io/run_checkpoints.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/run_directory.h"
#include "tune/recipes/sft/memory_report.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_data.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/recipes/sft/sft_recipe.h"
#include "tune/train/loss.h"
#include "tune/train/optimizer_step.h"

namespace tune::recipes::sft {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<train::NamedParameter> trainable_parameters(const models::LlamaForCausalLM& model) {
  std::vector<train::NamedParameter> params;
  for (const auto& item : model->named_parameters()) {
    if (item.value().requires_grad()) params.push_back({item.key(), item.value()});
  }
  return params;
}

int64_t total_bytes(const std::vector<torch::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const auto& tensor : tensors) bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return bytes;
}

// Mean next-token loss over the evaluation set, without gradients or dropout.
double evaluate(models::LlamaForCausalLM& model, const std::vector<data::SftBatch>& batches,
                precision::MixedPrecision precision, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  double loss_sum = 0.0;
  int64_t tokens = 0;
  for (const auto& batch : batches) {
    precision::AutocastScope autocast(precision, device);
    const auto logits = model->forward(batch.input_ids.to(device),
                                       {batch.position_ids.to(device), batch.segment_ids.to(device)});
    loss_sum += train::causal_lm_loss_sum(logits, batch.labels.to(device)).item<double>();
    tokens += batch.loss_tokens;
  }
  model->train();
  return tokens > 0 ? loss_sum / static_cast<double>(tokens) : std::nan("");
}

}  // namespace

int train(const TrainRequest& request) {
  // ---- checks: every config problem surfaces here, before any work or output
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  TrainingSettings training = read_training_settings(config);
  const SftSettings sft = read_sft_settings(config);
  const std::filesystem::path output_dir = request.output_dir;

  // ---- setup
  const int threads = configure_threads(run.threads);
  memory_tracker::install();
  const torch::Device device(run.device);
  const bool cuda = device.is_cuda();
  prepare_run_directory(output_dir, config, request.resume_from);

  const data::Tokenizer tokenizer = load_tokenizer(sft);
  models::LlamaForCausalLM model = build_model(sft, tokenizer, run.seed);
  model->to(device);
  auto checkpointing = std::make_shared<memory::CheckpointRunner>(run.checkpointing, model->num_blocks());
  model->set_block_runner(checkpointing);
  model->train();

  const PreparedData prepared = prepare_data(sft.data, tokenizer, run.seed);
  data::LoaderOptions loader_options;
  loader_options.batch_size = training.batch_size;
  loader_options.max_length = sft.data.max_length;
  loader_options.packing = sft.data.packing;
  loader_options.shuffle = sft.data.shuffle;
  loader_options.seed = run.seed;
  data::SftLoader loader(prepared.train, loader_options);
  const auto eval_batches = data::SftLoader(prepared.eval, loader_options).all_batches_in_order();

  const auto params = trainable_parameters(model);
  train::AdamW optimizer(train::make_param_groups(params, training.weight_decay), training.adamw);
  std::vector<torch::Tensor> param_tensors;
  for (const auto& param : params) param_tensors.push_back(param.tensor);
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, loader.batches_per_epoch() / training.gradient_accumulation_steps);
  training.schedule.total_steps = training.max_steps > 0 ? training.max_steps : training.epochs * steps_per_epoch;
  const int64_t total_steps = training.schedule.total_steps;

  // fp16 needs loss scaling so small gradients survive; bf16 has fp32's exponent range and does not.
  std::unique_ptr<precision::DynamicLossScaler> scaler;
  if (run.mixed_precision == precision::MixedPrecision::fp16) scaler = std::make_unique<precision::DynamicLossScaler>();

  TrainerState state;
  MetricsWriter metrics(output_dir);
  if (request.resume_from) {
    state = read_checkpoint(*request.resume_from, model, optimizer);
    loader.restore(state.loader);
    if (scaler && state.loss_scale > 0) {
      scaler->restore(state.loss_scale, state.loss_scale_clean_steps, state.skipped_steps);
    }
    log::info("resumed from {} at step {}", request.resume_from->string(), state.step);
  }
  metrics.truncate_after(state.step);
  LossCurves curves = loss_curves_from_metrics(read_metrics(metrics.path()));

  // ---- say what is active and where memory will go (measured figures follow per step)
  int64_t all_param_bytes = 0;
  for (const auto& item : model->parameters()) all_param_bytes += item.numel() * static_cast<int64_t>(item.element_size());
  ActivationShape shape{training.batch_size, sft.data.max_length,
                        run.mixed_precision == precision::MixedPrecision::no ? 4 : 2};
  std::vector<bool> checkpointed_layers;
  for (int64_t i = 0; i < model->num_blocks(); ++i) checkpointed_layers.push_back(checkpointing->is_checkpointed(i));
  log::info("model: {} layers, hidden {}, {} parameters ({} trainable{}), device {}, {} threads",
            model->config().num_hidden_layers, model->config().hidden_size, format_count(all_param_bytes / 4.0),
            format_count(total_bytes(param_tensors) / 4.0), model->has_lora() ? ", LoRA" : "", run.device, threads);
  log::info("gradient checkpointing: {}", checkpointing->describe());
  log::info("mixed precision: {}", run.mixed_precision == precision::MixedPrecision::no
                                       ? std::string("off (fp32)")
                                       : precision::to_string(run.mixed_precision) + " autocast, fp32 master weights");
  log::info("memory plan: parameters {}, gradients {}, optimizer state {}, activations ~{} (estimate for batch {} x {} "
            "tokens)", format_bytes(all_param_bytes), format_bytes(total_bytes(param_tensors)),
            format_bytes(2.0 * total_bytes(param_tensors)), format_bytes(estimate_activation_bytes(model->config(), shape, checkpointed_layers)),
            shape.batch, shape.sequence);
  log::info("training: {} steps ({} per epoch), {} micro-batch(es) of {} rows x {} tokens per step", total_steps,
            steps_per_epoch, training.gradient_accumulation_steps, training.batch_size, sft.data.max_length);

  // Saves a complete checkpoint of the current state and prunes old ones.
  auto save = [&]() {
    const auto temporary = io::begin_checkpoint(output_dir, state.step);
    state.loader = loader.position();
    if (scaler) {
      state.loss_scale = scaler->current_scale();
      state.loss_scale_clean_steps = scaler->clean_steps();
      state.skipped_steps = scaler->skipped_steps();
    }
    write_checkpoint(temporary, model, tokenizer, sft.model.path.value_or(""), &optimizer, state);
    const auto committed = io::commit_checkpoint(temporary, state.step);
    io::prune_checkpoints(output_dir, static_cast<int>(training.keep_last));
    return committed;
  };

  // ---- the step loop
  install_interrupt_handler();
  ProgressOptions progress_options;
  progress_options.total_steps = total_steps;
  progress_options.start_step = state.step;
  progress_options.log_every = training.log_every;
  Progress progress(progress_options);
  const auto run_start = Clock::now();
  const double elapsed_before = state.elapsed_s;
  int64_t window_tokens = 0;
  auto window_start = Clock::now();
  memory_tracker::reset_peak(cuda);
  int64_t window_peak = 0;
  int64_t run_peak = 0;

  while (state.step < total_steps) {
    // data: this step's micro-batches, so the loss is normalised by the tokens of the whole step
    std::vector<data::SftBatch> micro_batches;
    int64_t step_loss_tokens = 0;
    for (int64_t i = 0; i < training.gradient_accumulation_steps; ++i) {
      micro_batches.push_back(loader.next());
      step_loss_tokens += micro_batches.back().loss_tokens;
    }
    memory_tracker::reset_peak(cuda);
    double step_loss = 0.0;
    for (const auto& batch : micro_batches) {
      torch::Tensor loss;
      {
        precision::AutocastScope autocast(run.mixed_precision, device);  // forward under autocast only
        const auto logits = model->forward(batch.input_ids.to(device),
                                           {batch.position_ids.to(device), batch.segment_ids.to(device)});
        loss = train::causal_lm_loss_sum(logits, batch.labels.to(device)) / std::max<int64_t>(1, step_loss_tokens);
      }
      (scaler ? scaler->scale(loss) : loss).backward();
      step_loss += loss.item<double>();
      window_tokens += batch.tokens;
    }
    const double lr = training.schedule.at(state.step);
    const auto outcome = train::finish_step(param_tensors, optimizer, scaler.get(), training.clip_grad_norm, lr,
                                            std::isfinite(step_loss));
    const double grad_norm = outcome.grad_norm;
    if (!outcome.applied && scaler && std::isfinite(step_loss)) {
      progress.print(fmt::format("step {}: inf/NaN gradients at loss scale {}: update skipped, scale now {}",
                                 state.step + 1, outcome.loss_scale, scaler->current_scale()));
    } else if (!outcome.applied && training.on_nan == "stop") {
      const auto last = io::newest_complete_checkpoint(output_dir);
      throw Error(fmt::format("step {}: loss is {} (gradient norm {}); stopping. The last complete checkpoint is {}. "
                              "HINT: lower optimizer.lr, or set training.on_nan: skip",
                              state.step + 1, step_loss, grad_norm, last ? last->string() : "none"));
    } else if (!outcome.applied) {
      log::warn("step {}: non-finite loss {} or gradient norm {}: update skipped", state.step + 1, step_loss, grad_norm);
    }
    ++state.step;
    state.tokens_seen += window_tokens;
    window_peak = std::max(window_peak, memory_tracker::peak_bytes(cuda));
    run_peak = std::max(run_peak, window_peak);

    // log
    const bool log_now = state.step % training.log_every == 0 || state.step == total_steps;
    const bool eval_now = !eval_batches.empty() && ((training.eval_every > 0 && state.step % training.eval_every == 0) ||
                                                    state.step == total_steps);
    const double window_seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
    const double tokens_per_s = window_seconds > 0 ? window_tokens / window_seconds : 0.0;
    state.elapsed_s = elapsed_before + std::chrono::duration<double>(Clock::now() - run_start).count();
    progress.update(state.step, step_loss, tokens_per_s);
    if (log_now || eval_now) {
      nlohmann::json record = {{"step", state.step},         {"loss", step_loss},
                               {"lr", lr},                   {"grad_norm", grad_norm},
                               {"tokens_per_s", tokens_per_s}, {"peak_mem_bytes", window_peak},
                               {"elapsed_s", state.elapsed_s}};
      if (scaler) record["loss_scale"] = scaler->current_scale();
      curves.train.push_back({state.step, step_loss});
      if (eval_now) {
        const double eval_loss = evaluate(model, eval_batches, run.mixed_precision, device);
        record["eval_loss"] = eval_loss;
        curves.eval.push_back({state.step, eval_loss});
        progress.print(fmt::format("step {}: eval loss {:.4f}", state.step, eval_loss));
      }
      metrics.write(record);
      write_loss_svg(output_dir / "loss.svg", curves.train, curves.eval);
      window_tokens = 0;
      window_peak = 0;
      window_start = Clock::now();
    }
    // checkpoint
    const bool save_now = (training.save_every > 0 && state.step % training.save_every == 0) || state.step == total_steps;
    if (save_now || interrupt_requested()) {
      const auto path = save();
      progress.print(fmt::format("step {}: checkpoint saved to {}", state.step, path.string()));
    }
    if (interrupt_requested()) {
      progress.finish();
      log::warn("interrupted at step {}: checkpoint saved; continue with `tune train {} --resume`", state.step,
                (output_dir / "config.yaml").string());
      return kExitInterrupted;
    }
  }
  progress.finish();
  log::info("done: {} steps in {}, peak memory {} ({})", state.step, format_duration(state.elapsed_s),
            format_bytes(static_cast<double>(run_peak)),
            cuda ? "CUDA allocator" : "CPU tensor storage, tracking allocator");
  log::info("outputs: {}", output_dir.string());
  return 0;
}

}  // namespace tune::recipes::sft
