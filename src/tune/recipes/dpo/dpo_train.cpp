// `tune train` for the DPO recipe: the SFT recipe's model, tokenizer, LoRA/QLoRA, checkpointing, precision and data
// parallelism, with a preference step: chosen and rejected in one forward, the reference's log-probs without
// gradients (the base with adapters off, or a frozen copy), and one of the preference losses.
#include <cmath>
#include <utility>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/io/safetensors.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/row_keyed_dropout.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/dpo/dpo_data.h"
#include "tune/recipes/dpo/dpo_recipe.h"
#include "tune/recipes/dpo/dpo_settings.h"
#include "tune/recipes/dpo/dpo_step.h"
#include "tune/recipes/dpo/reference_logps.h"
#include "tune/recipes/gradient_storage.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/run_directory.h"
#include "tune/recipes/sft/llama_training.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/recipes/step_loop.h"
#include "tune/train/optimizer_step.h"

namespace tune::recipes::dpo {
namespace {

// The frozen reference of a full fine-tune: the policy's starting model (or dpo.reference_model), every weight
// frozen, stored in dpo.reference_dtype; no LoRA, no NF4.
models::LlamaForCausalLM build_reference(const DpoSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed,
                                         const torch::Device& device) {
  sft::SftSettings reference = settings.sft;
  if (settings.reference_path) reference.model.path = *settings.reference_path;
  reference.model.lora = models::LlamaLoraOptions{};
  models::LlamaForCausalLM model =
      sft::build_model(reference, tokenizer, seed, settings.reference_bf16, sft::ModelUse::inference);
  model->to(device);
  model->eval();
  return model;
}

constexpr const char* kReferenceLogpsFile = "reference_logps.safetensors";

// What the precomputed log-probs depend on besides the pairs' token ids (reference_logps.h fingerprints both).
std::string reference_identity(const DpoSettings& settings, const config::Config& config) {
  if (settings.reference_is_base()) {
    return fmt::format("the base of {} with the LoRA adapters off (lora.quantize_base {}, param_dtype {}), "
                       "mixed_precision {}", settings.sft.model.path.value_or(""),
                       config.get_string("lora.quantize_base"), config.get_string("param_dtype"),
                       config.get_string("mixed_precision"));
  }
  return fmt::format("{} in {}, mixed_precision {}", settings.reference_path.value_or(settings.sft.model.path.value_or("")),
                     settings.reference_bf16 ? "bf16" : "fp32", config.get_string("mixed_precision"));
}

// The summed figures of a tally over every rank's share.
PreferenceTally sum_over_ranks(const PreferenceTally& tally, DataParallel& parallel) {
  if (!parallel.active()) return tally;
  std::vector<double> values = tally.values();
  for (double& value : values) value = parallel.sum(value);
  return PreferenceTally::from_values(values);
}

}  // namespace

int train(const TrainRequest& request) {
  // ---- checks: every config problem surfaces here, before any work or output
  const config::Config& config = request.config;
  validate_dpo_config(config);
  const RunSettings run = read_run_settings(config);
  TrainingSettings training = read_training_settings(config);
  const DpoSettings settings = read_dpo_settings(config);
  const sft::DataSettings& data_settings = settings.sft.data;
  if (data_settings.train.empty()) {
    config.fail("data.train", "is required to train: a JSONL or JSON file of preference rows ({prompt, chosen, "
                              "rejected}), or a list of files");
  }
  for (const auto& file : data_settings.train) {
    if (!std::filesystem::exists(file.path)) {
      config.fail("data.train", fmt::format("names '{}', which does not exist", file.path));
    }
  }
  if (data_settings.eval_path && !std::filesystem::exists(*data_settings.eval_path)) {
    config.fail("data.eval", fmt::format("names '{}', which does not exist", *data_settings.eval_path));
  }
  if (settings.reference_path && !std::filesystem::exists(*settings.reference_path)) {
    config.fail("dpo.reference_model", fmt::format("names '{}', which does not exist", *settings.reference_path));
  }
  const std::filesystem::path output_dir = request.output_dir;

  // ---- setup
  const int threads = configure_threads(threads_for_this_rank(run.threads));
  memory_tracker::install();
  const torch::Device device(run.device);
  run_on_main_rank([&] { prepare_run_directory(output_dir, config, request.resume_from); },
                   "prepare the run directory");

  const data::Tokenizer tokenizer = sft::load_tokenizer(settings.sft);
  models::LlamaForCausalLM model = sft::build_model(settings.sft, tokenizer, run.seed, run.frozen_weights_bf16);
  if (run.frozen_weights_bf16) sft::store_frozen_weights_in_bf16(model);
  model->to(device);
  // Both halves of every pair in one forward: twice the rows of the batch.
  CpuWorkload workload = llama_workload(model->config(), 2 * training.batch_size, data_settings.max_length,
                                        precision::compute_dtype(run.mixed_precision), /*training=*/true);
  add_nf4_projections(workload, model->config(), 2 * training.batch_size * data_settings.max_length,
                      model->lora_options().nf4_modules);
  choose_cpu_kernels(workload, device);
  sft::LlamaTraining setup = sft::prepare_llama_training(model, config, run);
  const std::vector<train::NamedParameter>& params = setup.params;
  const std::vector<torch::Tensor>& param_tensors = setup.param_tensors;
  const std::shared_ptr<memory::CheckpointRunner>& checkpointing = setup.checkpointing;
  DataParallel& parallel = *setup.parallel;
  // A full fine-tune's frozen copy, built once the policy is sharded (so a process never holds both whole); under
  // full_shard held as flat shards too (1/N of it on each process), its blocks gathered one at a time during its
  // forward and released after, as FSDP does with TRL's reference model.
  std::optional<models::LlamaForCausalLM> reference;
  if (settings.uses_reference() && !settings.reference_is_base() && !settings.precompute_reference) {
    reference = build_reference(settings, tokenizer, run.seed, device);
  }
  std::unique_ptr<DataParallel> reference_parallel;
  if (reference && parallel.fully_sharded()) {
    reference_parallel = sft::llama_data_parallel(*reference, config, /*trainable=*/{});
    (*reference)->set_block_runner(reference_parallel->block_runner(std::make_shared<nn::PlainBlockRunner>()));
  }

  PreparedPairs prepared = prepare_pairs(data_settings, tokenizer, run.seed);
  if (settings.precompute_reference) {
    // A full fine-tune's reference is loaded for the pass alone (and not at all when the figures are stored).
    std::optional<models::LlamaForCausalLM> temporary;
    ReferencePass pass;
    pass.identity = reference_identity(settings, config);
    pass.pairs_per_batch = training.batch_size * parallel.size();
    pass.logps = [&](const data::PreferenceBatch& batch) {
      if (!settings.reference_is_base() && !temporary) temporary = build_reference(settings, tokenizer, run.seed, device);
      precision::AutocastScope autocast(run.mixed_precision, device);
      return reference_pair_logps(model, temporary ? &*temporary : nullptr,
                                  data_settings.packing ? data::pack_pairs(batch) : batch, device);
    };
    std::optional<std::filesystem::path> earlier;
    if (request.resume_from) earlier = request.resume_from->parent_path().parent_path() / kReferenceLogpsFile;
    attach_reference_logps(prepared, pass, parallel, output_dir / kReferenceLogpsFile, earlier);
  }
  // The loader yields global batches (every rank's pairs); each rank computes its share.
  data::PreferenceLoader loader(prepared.train, training.batch_size * parallel.size(), data_settings.shuffle, run.seed,
                                prepared.file_weights);
  const auto eval_batches = prepared.eval.empty()
                                ? std::vector<data::PreferenceBatch>{}
                                : data::PreferenceLoader(prepared.eval, training.batch_size * parallel.size(), false,
                                                         run.seed)
                                      .all_batches_in_order();

  train::AdamW optimizer(parallel.optimizer_groups(params, training.weight_decay), training.adamw);
  std::unique_ptr<precision::DynamicLossScaler> scaler = sft::make_loss_scaler(run);
  const std::unique_ptr<train::CompactGradients> compact_gradients =
      make_compact_gradients(config, training, run, param_tensors, {parallel.active(), scaler != nullptr});
  bool held_gradients_said = false;
  training.schedule.total_steps = training.total_steps(loader.batches_per_epoch());

  sft::TrainerState state;
  if (request.resume_from) {
    parallel.gather_parameters();
    OptimizerStateReader read_optimizer;
    if (parallel.fully_sharded()) read_optimizer = [&](const auto& dir) { return parallel.read_sharded_optimizer_state(dir); };
    state = sft::read_checkpoint(*request.resume_from, model, optimizer, read_optimizer);
    parallel.reshard_parameters();
    loader.restore(state.loader);
    sft::restore_loss_scaler(scaler.get(), state);
    log::info("resumed from {} at step {}", request.resume_from->string(), state.step);
  }

  // ---- say what is active
  int64_t param_bytes = 0, trainable_bytes = 0;
  for (const auto& tensor : model->parameters()) param_bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  for (const auto& tensor : param_tensors) trainable_bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  param_bytes += sft::nf4_footprint(model).bytes;
  param_bytes = parallel.bytes_per_process(param_bytes, false);  // full_shard: its flat shards
  trainable_bytes = parallel.bytes_per_process(trainable_bytes, true);
  int64_t reference_bytes = 0;
  if (reference) {
    for (const auto& tensor : (*reference)->parameters()) {
      reference_bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    }
    if (reference_parallel) reference_bytes = reference_parallel->bytes_per_process(reference_bytes, false);
  }
  const std::string reference_text =
      !settings.uses_reference() ? "none (the loss is reference-free)"
      : settings.precompute_reference ? "log-probs precomputed before training (none held now)"
      : settings.reference_is_base()
          ? "the base model with the LoRA adapters off (no second copy)"
          : fmt::format("a frozen copy of {} in {} ({}{})", settings.reference_path.value_or(*settings.sft.model.path),
                        settings.reference_bf16 ? "bf16" : "fp32", format_bytes(reference_bytes),
                        reference_parallel ? " on this process: full_shard's flat shards" : "");
  log::info("dpo: loss {} (beta {}{}), reference: {}", config.get_string("dpo.loss"), settings.loss.beta,
            settings.loss.type == train::PreferenceLossType::simpo
                ? fmt::format(", gamma {}", settings.loss.simpo_gamma)
                : "",
            reference_text);
  log::info("model: {} layers, hidden {}, parameters {} ({} trainable{}), device {}, {} threads",
            model->config().num_hidden_layers, model->config().hidden_size, format_bytes(param_bytes),
            format_bytes(trainable_bytes), model->has_lora() ? ", LoRA" : "", run.device, threads);
  log::info("gradient checkpointing: {}", checkpointing->describe());
  log::info("training: {} steps ({} batches per epoch), {} micro-batch(es) of {} pairs (x2 sequences) per step{}",
            training.schedule.total_steps, loader.batches_per_epoch(), training.gradient_accumulation_steps,
            training.batch_size, parallel.active() ? fmt::format(" on each of {} processes", parallel.size()) : "");
  if (parallel.active()) log::info("data parallel: {}", parallel.describe());
  log::info("data.packing: {}", data_settings.packing
                                    ? "each batch's sequences packed without padding into as few rows of its width "
                                      "as fit (attention kept within each sequence)"
                                    : "off: one right-padded row per sequence");
  const nlohmann::json memory_plan = {{"parameters_bytes", param_bytes},
                                      {"reference_bytes", reference_bytes},
                                      {"optimizer_state_bytes", optimizer.state_bytes()},
                                      {"gradient_checkpointing", checkpointing->describe()},
                                      {"compact_gradients", compact_gradients != nullptr},
                                      {"mixed_precision", precision::to_string(run.mixed_precision)}};

  models::LlamaForCausalLM* reference_model = reference ? &*reference : nullptr;
  // data.packing: a rank's share of a batch (never a batch before slicing) packed without padding.
  auto packed = [&](data::PreferenceBatch batch) {
    return data_settings.packing ? data::pack_pairs(batch) : batch;
  };
  // The loss of a (local share of a) batch, normalised by the whole step's pairs (and chosen tokens, orpo), so the
  // gradients summed over micro-batches and ranks are those of one process running the global batch.
  // The reference's log-probs of a batch. A separate copy runs before the policy's gathers (parallel.before_forward()
  // below), so under full_shard its gathered units never meet the policy's; the base with the adapters off is the
  // policy itself and runs after them.
  auto reference_terms = [&](const data::PreferenceBatch& batch) {
    precision::AutocastScope autocast(run.mixed_precision, device);
    if (settings.precompute_reference) return stored_reference_logps(batch, device);
    if (!settings.uses_reference()) return train::PairLogps{};
    if (reference_parallel) reference_parallel->before_forward();
    train::PairLogps logps = reference_pair_logps(model, reference_model, batch, device);
    if (reference_parallel) reference_parallel->release_parameters();
    return logps;
  };
  // The policy's forward and the loss, with parallel.before_forward() (the policy's gathers) and the reference's
  // log-probs taken in that order.
  auto batch_terms = [&](const data::PreferenceBatch& batch) {
    train::PairLogps reference_logps;
    if (reference_model != nullptr) reference_logps = reference_terms(batch);
    parallel.before_forward();
    if (reference_model == nullptr) reference_logps = reference_terms(batch);
    precision::AutocastScope autocast(run.mixed_precision, device);
    const train::PairLogps policy =
        pair_logps(model, batch, device, settings.loss.type == train::PreferenceLossType::orpo);
    return std::pair{train::preference_loss(policy, reference_logps, settings.loss), policy};
  };

  StepLoopHooks hooks;
  hooks.step = [&](int64_t step) {
    std::vector<data::PreferenceBatch> micro_batches;
    double step_pairs = 0, step_chosen_tokens = 0;
    for (int64_t i = 0; i < training.gradient_accumulation_steps; ++i) {
      micro_batches.push_back(loader.next());
      step_pairs += static_cast<double>(micro_batches.back().pairs);
      step_chosen_tokens += static_cast<double>(chosen_sequence_tokens(micro_batches.back()));
    }
    StepResult result;
    PreferenceTally tally;
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      result.items += static_cast<double>(micro_batches[i].tokens);
      const auto share = parallel.micro_batch_share(micro_batches[i].pairs);
      if (!share) continue;
      const RowRange rows = share->rows;
      const bool dummy = share->dummy;
      const data::PreferenceBatch batch =
          packed(parallel.active() ? data::slice_pairs(micro_batches[i], rows.begin, rows.end) : micro_batches[i]);
      parallel.before_backward(i + 1 == micro_batches.size());
      const nn::RowKeyScope row_key({static_cast<uint64_t>(run.seed), step, static_cast<int64_t>(i), rows.begin});
      auto [terms, policy] = batch_terms(batch);
      torch::Tensor loss = terms.per_pair.sum() / step_pairs;
      if (terms.nll_sum.defined()) loss = loss + terms.nll_sum / std::max(1.0, step_chosen_tokens);
      if (dummy) {
        loss = loss * 0.0;
      } else {
        tally.add(terms, policy, settings.loss.type);
      }
      (scaler ? scaler->scale(loss) : loss).backward();
    }
    parallel.finish_gradients();
    result.resident_bytes = memory_tracker::live_bytes(device.is_cuda());
    tally = sum_over_ranks(tally, parallel);
    result.loss = tally.loss();
    result.metrics = tally.means();
    result.progress_note = fmt::format("reward acc {:.2f}", tally.accuracies / std::max(1.0, tally.pairs));
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
  // Evaluation: the same terms without gradients over the held-out pairs; its figures under TRL's eval_ names.
  PreferenceTally eval_tally;
  hooks.evaluate = [&]() -> std::optional<double> {
    if (eval_batches.empty()) return std::nullopt;
    torch::NoGradGuard no_grad;
    model->eval();
    PreferenceTally tally;
    for (const auto& global_batch : eval_batches) {
      RowRange rows = parallel.share(global_batch.pairs);
      // full_shard: a rank without pairs still runs the forward (its gathers), on pair 0, counting nothing.
      const bool dummy = rows.size() == 0 && parallel.every_rank_computes();
      if (rows.size() == 0 && !dummy) continue;
      if (dummy) rows = {0, 1};
      const data::PreferenceBatch batch =
          packed(parallel.active() ? data::slice_pairs(global_batch, rows.begin, rows.end) : global_batch);
      auto [terms, policy] = batch_terms(batch);
      if (!dummy) tally.add(terms, policy, settings.loss.type);
    }
    parallel.release_parameters();
    model->train();
    eval_tally = sum_over_ranks(tally, parallel);
    return eval_tally.loss();
  };
  hooks.evaluate_metrics = [&] { return eval_tally.means(); };
  hooks.save = [&](const std::filesystem::path& dir, int64_t step, double elapsed_s) {
    state.step = step;
    state.elapsed_s = elapsed_s;
    state.loader = loader.position();
    sft::save_loss_scaler(scaler.get(), state);
    sft::write_checkpoint(dir, model, tokenizer, settings.sft.model.path.value_or(""), &optimizer, state,
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
  StepLoopSettings loop = make_step_loop_settings(training, output_dir, "tokens", device.is_cuda());
  loop.plot_metric = "rewards/margins";  // loss.svg: the reward margin beside the loss, as TRL users plot it
  loop.plot_metric_label = "reward margin";
  return run_step_loop(loop, hooks, {state.step, state.elapsed_s}, memory_plan);
}

}  // namespace tune::recipes::dpo
