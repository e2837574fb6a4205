// `tune train` for the SFT recipe, top to bottom: checks -> setup -> what one step is -> the step loop.
#include <cmath>
#include <utility>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/data/sft_loader.h"
#include "tune/io/safetensors.h"
#include "tune/nn/attention_core.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/gradient_storage.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/run_directory.h"
#include "tune/recipes/sft/memory_report.h"
#include "tune/recipes/sft/llama_training.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_data.h"
#include "tune/recipes/sft/sft_graph_step.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/recipes/sft/sft_recipe.h"
#include "tune/recipes/step_loop.h"
#include "tune/nn/row_keyed_dropout.h"
#include "tune/train/linear_cross_entropy.h"
#include "tune/train/loss.h"
#include "tune/train/optimizer_step.h"

namespace tune::recipes::sft {
namespace {

int64_t total_bytes(const std::vector<torch::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const auto& tensor : tensors) bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return bytes;
}

// Mean next-token loss over the evaluation set, without gradients or dropout; each rank evaluates its share of
// every batch and the sums are added over ranks.
double evaluate(models::LlamaForCausalLM& model, const std::vector<data::SftBatch>& global_batches,
                precision::MixedPrecision precision, const torch::Device& device, DataParallel& parallel) {
  torch::NoGradGuard no_grad;
  model->eval();
  double loss_sum = 0.0;
  double tokens = 0;
  for (const auto& global_batch : global_batches) {
    RowRange rows = parallel.share(global_batch.input_ids.size(0));
    // full_shard: a rank without rows still runs the forward (its gathers), on row 0, counting nothing.
    const bool dummy = rows.size() == 0 && parallel.every_rank_computes();
    if (rows.size() == 0 && !dummy) continue;
    if (dummy) rows = {0, 1};
    const data::SftBatch batch = parallel.active() ? data::slice_rows(global_batch, rows.begin, rows.end) : global_batch;
    parallel.before_forward();
    precision::AutocastScope autocast(precision, device);
    const auto logits = model->forward(batch.input_ids.to(device),
                                       {batch.position_ids.to(device), batch.segment_ids.to(device)});
    if (dummy) continue;
    loss_sum += train::causal_lm_loss_sum(logits, batch.labels.to(device)).item<double>();
    tokens += static_cast<double>(batch.loss_tokens);
  }
  parallel.release_parameters();
  model->train();
  return parallel.sum(loss_sum) / std::max(1.0, parallel.sum(tokens));
}

}  // namespace

int train(const TrainRequest& request) {
  // ---- checks: every config problem surfaces here, before any work or output
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  TrainingSettings training = read_training_settings(config);
  const SftSettings sft = read_sft_settings(config);
  validate_sft_config(config);
  if (sft.data.train.empty()) {
    config.fail("data.train", "is required to train: a JSONL or JSON file of rows, or a list of files (see tune validate)");
  }
  // Every data file the recipe names exists, or the error names its key and where it was set (before anything is
  // written; a file that vanishes later is still reported by the reader, with its path).
  for (const auto& file : sft.data.train) {
    if (!std::filesystem::exists(file.path)) {
      config.fail("data.train", fmt::format("names '{}', which does not exist", file.path));
    }
  }
  if (sft.data.eval_path && !std::filesystem::exists(*sft.data.eval_path)) {
    config.fail("data.eval", fmt::format("names '{}', which does not exist", *sft.data.eval_path));
  }
  const std::filesystem::path output_dir = request.output_dir;

  // ---- setup
  const int threads = configure_threads(threads_for_this_rank(run.threads));
  memory_tracker::install();
  const torch::Device device(run.device);
  run_on_main_rank([&] { prepare_run_directory(output_dir, config, request.resume_from); },
                   "prepare the run directory");

  const data::Tokenizer tokenizer = load_tokenizer(sft);
  models::LlamaForCausalLM model = build_model(sft, tokenizer, run.seed, run.frozen_weights_bf16);
  if (run.frozen_weights_bf16) {
    log::info("param_dtype bf16: {} frozen tensors stored in bf16", store_frozen_weights_in_bf16(model));
  }
  model->to(device);
  // Before the activation estimates below: they count the attention core that was chosen.
  CpuWorkload workload = llama_workload(model->config(), training.batch_size, sft.data.max_length,
                                        precision::compute_dtype(run.mixed_precision), /*training=*/true);
  add_nf4_projections(workload, model->config(), training.batch_size * sft.data.max_length,
                      model->lora_options().nf4_modules);
  choose_cpu_kernels(workload, device);
  LlamaTraining setup = prepare_llama_training(model, config, run);
  const std::vector<train::NamedParameter>& params = setup.params;
  const std::vector<torch::Tensor>& param_tensors = setup.param_tensors;
  const std::shared_ptr<memory::CheckpointRunner>& checkpointing = setup.checkpointing;
  DataParallel& parallel = *setup.parallel;

  // The loader yields global batches (every rank's rows); each rank trains on its share of them, so the samples of
  // a step, and their order, do not depend on the number of processes.
  const PreparedData prepared = prepare_data(sft.data, tokenizer, run.seed);
  data::LoaderOptions loader_options;
  loader_options.batch_size = training.batch_size * parallel.size();
  loader_options.max_length = sft.data.max_length;
  loader_options.packing = sft.data.packing;
  loader_options.shuffle = sft.data.shuffle;
  loader_options.seed = run.seed;
  loader_options.fixed_shape = sft.cuda_graph;  // one shape for every step of a CUDA graph
  data::SftLoader loader(prepared.train, loader_options);
  const auto eval_batches = prepared.eval.empty() ? std::vector<data::SftBatch>{}
                                                  : data::SftLoader(prepared.eval, loader_options).all_batches_in_order();

  // Under shard_grad_op this process's optimizer holds its share of the parameters only.
  // Under full_shard it holds the flat shards of this process.
  train::AdamW optimizer(parallel.optimizer_groups(params, training.weight_decay), training.adamw);
  // fp16 needs loss scaling so small gradients survive; bf16 has fp32's exponent range and does not.
  std::unique_ptr<precision::DynamicLossScaler> scaler = make_loss_scaler(run);
  const std::unique_ptr<train::CompactGradients> compact_gradients =
      make_compact_gradients(config, training, run, param_tensors, {parallel.active(), scaler != nullptr});
  bool held_gradients_said = false;
  std::unique_ptr<SftGraphStep> graph_step;
  if (sft.cuda_graph) {
    check_cuda_graph_run(config, model, optimizer, parallel.active());
    graph_step = std::make_unique<SftGraphStep>(model, optimizer, param_tensors, run, training, sft.chunked_loss,
                                                sft.data.max_length, device);
  }
  training.schedule.total_steps = training.total_steps(loader.batches_per_epoch());

  TrainerState state;
  if (request.resume_from) {
    parallel.gather_parameters();  // full_shard: the weights load into whole parameters, then re-shard
    OptimizerStateReader read_optimizer;
    if (parallel.fully_sharded()) read_optimizer = [&](const auto& dir) { return parallel.read_sharded_optimizer_state(dir); };
    state = read_checkpoint(*request.resume_from, model, optimizer, read_optimizer);
    parallel.reshard_parameters();
    loader.restore(state.loader);
    restore_loss_scaler(scaler.get(), state);
    log::info("resumed from {} at step {}", request.resume_from->string(), state.step);
  }

  // ---- say what is active and where memory will go (measured figures follow per step and in memory.json)
  int64_t all_param_bytes = 0;
  double parameter_count = 0;
  for (const auto& item : model->parameters()) {
    all_param_bytes += item.numel() * static_cast<int64_t>(item.element_size());
    parameter_count += static_cast<double>(item.numel());
  }
  // QLoRA: the NF4 base weights are buffers, not parameters, and count at their packed size.
  const Nf4Footprint nf4 = nf4_footprint(model);
  all_param_bytes += nf4.bytes;
  parameter_count += static_cast<double>(nf4.elements);
  // Per process: under full_shard its flat shards.
  all_param_bytes = parallel.bytes_per_process(all_param_bytes, false);
  const int64_t gradient_bytes = parallel.bytes_per_process(total_bytes(param_tensors), true);
  ActivationShape shape{training.batch_size, sft.data.max_length,
                        run.mixed_precision == precision::MixedPrecision::no ? 4 : 2};
  shape.mask_batch = training.batch_size;  // SFT rows carry segment ids (packing, padding): one mask per row
  shape.lora = model->lora_options();
  shape.base_weights_in_compute_dtype = run.frozen_weights_bf16 && model->has_lora();
  shape.bf16_residual = shape.base_weights_in_compute_dtype && run.mixed_precision == precision::MixedPrecision::bf16;
  // With the attention cores nn::run_attention_core will take (plainly run, recomputed and selective's layers).
  const RunnerStacks stacks =
      llama_stacks(model->config(), shape, device.type(), precision::compute_dtype(run.mixed_precision));
  const int64_t activation_estimate = estimate_for_runner(stacks.plain, stacks.selective, *checkpointing);
  const nlohmann::json memory_plan = {
      {"parameters_bytes", all_param_bytes},
      {"gradients_bytes", gradient_bytes},
      {"optimizer_state_bytes", optimizer.state_bytes()},
      {"activations_estimate_bytes", activation_estimate},
      {"gradient_checkpointing", checkpointing->describe()},
      {"compact_gradients", compact_gradients != nullptr},
      {"mixed_precision", precision::to_string(run.mixed_precision)}};
  log::info("model: {} layers, hidden {}, {} parameters ({} trainable{}), device {}, {} threads",
            model->config().num_hidden_layers, model->config().hidden_size, format_count(parameter_count),
            format_count(total_bytes(param_tensors) / 4.0),
            model->has_lora() ? (nf4.tensors > 0 ? ", QLoRA: NF4 base" : ", LoRA") : "", run.device, threads);
  log::info("gradient checkpointing: {}", checkpointing->describe());
  if (sft.chunked_loss) {
    log::info("loss: chunked linear cross-entropy (training.chunked_loss; the logits are never whole, so the "
              "activation estimate's logits term is an overestimate)");
  }
  log::info("mixed precision: {}", run.mixed_precision == precision::MixedPrecision::no
                                       ? std::string("off (fp32)")
                                       : precision::to_string(run.mixed_precision) + " autocast, fp32 master weights");
  log::info("memory plan: parameters {}, gradients {}, optimizer state {}, activations {}{} (estimate for batch {} x {} "
            "tokens)", format_bytes(all_param_bytes), format_bytes(gradient_bytes),
            format_bytes(optimizer.state_bytes()), "~",
            format_bytes(activation_estimate), shape.batch, shape.sequence);
  log::info("training: {} steps ({} batches per epoch), {} micro-batch(es) of {} rows x {} tokens per step{}",
            training.schedule.total_steps, loader.batches_per_epoch(), training.gradient_accumulation_steps, training.batch_size,
            sft.data.max_length, parallel.active() ? fmt::format(" on each of {} processes", parallel.size()) : "");
  if (parallel.active()) log::info("data parallel: {}", parallel.describe());
  if (graph_step) {
    log::info("cuda graph: the whole step (forward, backward, clipping, AdamW) is captured at step 2 and replayed "
              "after; every batch padded to {} rows x {} tokens (training.cuda_graph)",
              training.batch_size, sft.data.max_length);
  }

  // ---- one optimizer step: data, forward under autocast (blocks through the checkpointing runner), loss,
  // backward, then unscale / clip / update in finish_step
  StepLoopHooks hooks;
  hooks.step = [&](int64_t step) {
    // Global micro-batches, fetched first: every rank's loss is normalised by the whole step's tokens over all
    // ranks, so the gradients summed over ranks are those of one process running the global batch.
    std::vector<data::SftBatch> micro_batches;
    int64_t step_loss_tokens = 0;
    for (int64_t i = 0; i < training.gradient_accumulation_steps; ++i) {
      micro_batches.push_back(loader.next());
      step_loss_tokens += micro_batches.back().loss_tokens;
    }
    StepResult result;
    if (graph_step) {
      for (const auto& batch : micro_batches) result.items += static_cast<double>(batch.tokens);
      const bool was_captured = graph_step->captured();
      result.lr = training.schedule.at(step);
      const SftGraphStep::Outcome outcome = graph_step->run(micro_batches, step_loss_tokens, result.lr);
      result.loss = outcome.loss;
      result.grad_norm = outcome.grad_norm;
      result.applied = outcome.applied;
      result.resident_bytes = memory_tracker::live_bytes(device.is_cuda());
      if (graph_step->captured()) {
        // Replays allocate nothing: the step's working set is what its capture allocated, in the graph's pool.
        result.unseen_peak_bytes = graph_step->capture_peak_bytes();
        if (!was_captured) {
          log::info("cuda graph: step captured; its peak while captured {}, the graph's pool reserves {}",
                    format_bytes(static_cast<double>(graph_step->capture_peak_bytes())),
                    format_bytes(static_cast<double>(graph_step->pool_reserved_bytes())));
        }
      }
      state.tokens_seen += static_cast<int64_t>(result.items);
      return result;
    }
    // The step's loss stays on the device until every micro-batch is queued: one host sync per step, not one per
    // micro-batch (on CUDA a sync between micro-batches leaves the GPU idle while the CPU queues the next forward).
    torch::Tensor step_loss;
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      result.items += static_cast<double>(micro_batches[i].tokens);
      // Fewer rows than ranks: this rank adds zero gradients (under full_shard computing them, times zero).
      const auto share = parallel.micro_batch_share(micro_batches[i].input_ids.size(0));
      if (!share) continue;
      const RowRange rows = share->rows;
      const bool dummy = share->dummy;
      const data::SftBatch batch =
          parallel.active() ? data::slice_rows(micro_batches[i], rows.begin, rows.end) : micro_batches[i];
      parallel.before_backward(i + 1 == micro_batches.size());
      parallel.before_forward();
      // Random choices per row (LoRA's dropout) keyed by the row's place in the global batch: any process count
      // draws what one process would (nn/row_keyed_dropout.h); held through backward, whose recompute redraws them.
      const nn::RowKeyScope row_key({static_cast<uint64_t>(run.seed), step, static_cast<int64_t>(i), rows.begin});
      torch::Tensor loss;
      {
        precision::AutocastScope autocast(run.mixed_precision, device);
        const models::AttentionInputs attention{batch.position_ids.to(device), batch.segment_ids.to(device)};
        const torch::Tensor loss_sum = llama_loss_sum(model, batch.input_ids.to(device), batch.labels.to(device),
                                                      attention, sft.chunked_loss);
        loss = loss_sum / std::max<int64_t>(1, step_loss_tokens);
        if (dummy) loss = loss * 0.0;
      }
      (scaler ? scaler->scale(loss) : loss).backward();
      const torch::Tensor detached = loss.detach().to(torch::kDouble);
      step_loss = step_loss.defined() ? step_loss + detached : detached;
    }
    if (step_loss.defined()) result.loss = step_loss.item<double>();
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
    const auto outcome = train::finish_step(parallel.gradient_tensors(param_tensors), optimizer, scaler.get(),
                                            training.clip_grad_norm, result.lr, std::isfinite(result.loss),
                                            parallel.gradient_norm_sum(), compact_gradients.get());
    parallel.after_update(outcome.applied);
    result.applied = outcome.applied;
    result.grad_norm = outcome.grad_norm;
    if (scaler) {
      result.loss_scale = outcome.loss_scale;
      result.next_loss_scale = scaler->current_scale();
    }
    state.tokens_seen += static_cast<int64_t>(result.items);
    return result;
  };
  hooks.evaluate = [&]() -> std::optional<double> {
    if (eval_batches.empty()) return std::nullopt;
    return evaluate(model, eval_batches, run.mixed_precision, device, parallel);
  };
  hooks.save = [&](const std::filesystem::path& dir, int64_t step, double elapsed_s) {
    state.step = step;
    state.elapsed_s = elapsed_s;
    state.loader = loader.position();
    save_loss_scaler(scaler.get(), state);
    write_checkpoint(dir, model, tokenizer, sft.model.path.value_or(""), &optimizer, state,
                     parallel.shards_optimizer_state());
  };
  hooks.before_save = [&] { parallel.gather_parameters(); };
  hooks.after_save = [&] { parallel.release_parameters(); };
  if (parallel.shards_optimizer_state()) {
    hooks.save_optimizer_shard = [&](const std::filesystem::path& file,
                                     const std::map<std::string, std::string>& metadata) {
      io::save_safetensors(file, optimizer.state_tensors(), metadata);
    };
  }

  const StepLoopSettings loop = make_step_loop_settings(training, output_dir, "tokens", device.is_cuda());
  return run_step_loop(loop, hooks, {state.step, state.elapsed_s}, memory_plan);
}

void validate_sft_config(const config::Config& config) {
  const RunSettings run = read_run_settings(config);
  const TrainingSettings training = read_training_settings(config);
  (void)read_distributed_settings(config);
  const SftSettings sft = read_sft_settings(config);
  validate_shard_blocks(config, {models::LlamaForCausalLMImpl::block_type()});
  if (run.frozen_weights_bf16 && sft.model.lora.lora.rank == 0) {
    config.fail("param_dtype", "is 'bf16', which stores frozen weights in bf16, but full fine-tuning trains every "
                               "weight (kept in fp32); use it with lora.rank > 0");
  }
  if (sft.cuda_graph) check_cuda_graph_config(config, run, training, sft.model.lora.lora.dropout);
}

}  // namespace tune::recipes::sft
