// tune-bench: memory and speed of one activation-checkpointing policy on a random Llama, as one JSON line.
// Each run is meant to be a fresh process (scripts/bench_checkpointing.sh runs policies side by side), so that
// peak RSS belongs to one configuration; the tracked activation peak is measured the way
// tests/recipes/test_checkpointing_memory.cpp measures it, and set beside the analytic estimate of memory_report.h.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tune/core/error.h"
#include "tune/core/cpu_block_cache.h"
#include "tune/core/cpu_gemm_mode.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/threads.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/lora_linear.h"
#include "tune/nn/rms_norm.h"
#include "tune/precision/cpu_gemm.h"
#include "tune/precision/mixed_precision.h"
#include "tune/precision/nf4.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/sft/memory_report.h"
#include "tune/train/compact_gradients.h"
#include "tune/train/adamw.h"
#include "tune/train/cuda_graph_step.h"
#include "tune/train/linear_cross_entropy.h"
#include "tune/train/loss.h"

namespace {

struct BenchOptions {
  int64_t layers = 8;
  int64_t sequence = 1024;
  int64_t batch = 1;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t kv_heads = 0;  // 0: same as heads
  int64_t intermediate = 688;
  int64_t vocab = 256;
  std::string policy = "full";
  int64_t k = 2;          // every_k spacing
  int steps = 3;          // measured steps
  int warmup = 1;         // unmeasured steps first (allocate parameter gradients, warm oneDNN)
  int threads = 2;
  std::string dtype = "bf16";
  uint64_t seed = 0;
  std::string profile;    // non-empty: one more step under the autograd profiler, its trace written here
  std::string device = "cpu";  // cpu | cuda
  int64_t lora_rank = 0;  // > 0: LoRA on every projection (q,k,v,o,gate,up,down), base weights frozen
  bool optimizer = false; // also an AdamW update per step (parameter gradients, moments), as a training step
  std::string loss = "plain";  // plain: lm_head + fp32 log_softmax | fused: train::causal_lm_linear_loss_sum
  bool tie_embeddings = false;
  double rope_theta = 10000.0;
  std::string fused_adamw = "auto";  // auto | on | off: AdamWOptions::kernel (optimizer.fused auto | true | false)
  // auto | on | off: training.compact_gradients (auto: with --optimizer on the CPU under bf16 with checkpointing)
  std::string compact_gradients = "auto";
  std::string base_dtype = "fp32";   // LoRA: the frozen base's storage dtype (param_dtype)
  std::string quantize_base = "none";  // LoRA: nf4 stores every projection's base weight in NF4 (QLoRA)
  bool double_quant = true;            // with nf4: lora.double_quant
  bool cuda_graph = false;  // capture the whole step into a CUDA graph once, replay it (train/cuda_graph_step.h)
};

// QLoRA's base: each NF4 projection gets random weights (the init scale of the dense layers, std 0.02), drawn in
// the base dtype on the layer's device and quantised as tune train quantises a checkpoint's as it loads.
void quantize_random_bases(torch::nn::Module& model, const std::string& base_dtype, bool double_quant) {
  const auto dtype = base_dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  for (const auto& item : model.named_modules()) {
    auto* linear = dynamic_cast<tune::nn::LoraLinearImpl*>(item.value().get());
    if (linear == nullptr || !linear->nf4_base()) continue;
    const auto on = torch::TensorOptions().dtype(dtype).device(linear->lora_A->weight.device());
    const torch::Tensor dense =
        torch::randn({linear->options.out_features(), linear->options.in_features()}, on) * 0.02;
    linear->set_nf4_weight(tune::precision::quantize_nf4(dense, 64, double_quant));
  }
}

// Resident set size now, from /proc (ru_maxrss only gives the peak).
int64_t current_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // reported in kB
  }
  return -1;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kB
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

struct StepResult {
  double seconds;
  double forward_seconds;  // forward + loss; the rest of `seconds` is backward (with any recompute)
  int64_t activation_bytes;  // tracked peak during forward + backward minus live bytes before forward
  int64_t peak_live_bytes;   // tracked peak, absolute (parameters and their gradients included)
  double loss;
};

// Live and peak tensor bytes on the bench's device: the tracking allocator on CPU, the caching allocator's
// statistics on CUDA.
int64_t live_bytes(bool cuda) {
  return cuda ? tune::memory_tracker::live_bytes(true) : tune::memory_tracker::cpu_live_bytes();
}
void reset_peak(bool cuda) {
  if (cuda) {
    tune::memory_tracker::reset_peak(true);
  } else {
    tune::memory_tracker::reset_cpu_peak();
  }
}
int64_t peak_bytes(bool cuda) {
  return cuda ? tune::memory_tracker::peak_bytes(true) : tune::memory_tracker::cpu_peak_bytes();
}

// Forward under the precision scope and the summed next-token loss.
torch::Tensor forward_loss(tune::models::LlamaForCausalLM& model, const torch::Tensor& input_ids,
                           const torch::Tensor& labels, tune::precision::MixedPrecision precision,
                           const BenchOptions& options) {
  tune::precision::AutocastScope autocast(precision, input_ids.device());
  if (options.loss == "fused") {
    return tune::train::causal_lm_linear_loss_sum(model->forward_hidden(input_ids), model->output_weight(), labels);
  }
  return tune::train::causal_lm_loss_sum(model->forward(input_ids), labels);
}

// --cuda-graph: the whole step (forward, backward, AdamW update) captured once and replayed
// (train/cuda_graph_step.h). The last warm-up call captures; every measured step is one replay, timed to the
// device's completion. forward_seconds stays empty (a replay has no host-visible forward). The peak is the
// allocator's while the step was captured: replays allocate nothing, so its counters would not see them.
struct GraphSteps {
  std::vector<double> seconds;
  double loss = 0.0;
  int64_t capture_peak_bytes = 0;
  int64_t pool_reserved_bytes = 0;
  int64_t live_before_capture = 0;
};
GraphSteps run_graph_steps(tune::models::LlamaForCausalLM& model, const torch::Tensor& input_ids,
                           const torch::Tensor& labels, tune::precision::MixedPrecision precision,
                           const BenchOptions& options, tune::train::AdamW& optimizer) {
  tune::train::CudaGraphStep graph(
      [&] {
        torch::Tensor loss = forward_loss(model, input_ids, labels, precision, options);
        loss.backward();
        optimizer.step(1e-5);
        return loss;
      },
      [&] { optimizer.zero_grad(); }, input_ids.device(), std::max(options.warmup - 1, 1));
  GraphSteps result;
  while (!graph.captured()) {
    torch::cuda::synchronize();
    result.live_before_capture = live_bytes(true);
    graph.run();
  }
  torch::cuda::synchronize();
  result.capture_peak_bytes = graph.capture_peak_bytes();
  result.pool_reserved_bytes = graph.capture_reserved_bytes();
  for (int i = 0; i < options.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    result.loss = graph.run().item<double>();  // synchronises the device
    result.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return result;
}

// One training step: forward under the precision scope, summed next-token loss, backward, and (with
// --optimizer) an AdamW update. Without the optimizer, gradients from earlier steps are zeroed in place so backward
// accumulates into existing storage, as in training; with it, they are dropped after the update (set to none, as
// torch's zero_grad does by default), so the peak includes their allocation, as HF's does.
StepResult train_step(tune::models::LlamaForCausalLM& model, const torch::Tensor& input_ids,
                      const torch::Tensor& labels, tune::precision::MixedPrecision precision,
                      const BenchOptions& options, tune::train::AdamW* optimizer,
                      tune::train::CompactGradients* compact = nullptr) {
  const bool cuda = input_ids.is_cuda();
  if (optimizer == nullptr) {
    for (auto& parameter : model->parameters()) {
      if (parameter.grad().defined()) parameter.mutable_grad().zero_();
    }
  }
  if (cuda) torch::cuda::synchronize();
  const int64_t before = live_bytes(cuda);
  reset_peak(cuda);
  const auto start = std::chrono::steady_clock::now();
  const torch::Tensor loss = forward_loss(model, input_ids, labels, precision, options);
  if (cuda) torch::cuda::synchronize();
  const auto forward_end = std::chrono::steady_clock::now();
  loss.backward();
  if (optimizer != nullptr) {
    optimizer->step(1e-5, compact);
    optimizer->zero_grad();
    if (compact != nullptr) compact->clear();
  }
  const double loss_value = loss.item<double>();  // synchronises the device
  const auto end = std::chrono::steady_clock::now();
  const int64_t peak = peak_bytes(cuda);
  return {std::chrono::duration<double>(end - start).count(),
          std::chrono::duration<double>(forward_end - start).count(), peak - before, peak, loss_value};
}

int run(const BenchOptions& options) {
  nlohmann::json result;
  result["tool"] = "tune";
  result["policy"] = options.policy;
  result["k"] = options.k;
  result["layers"] = options.layers;
  result["seq"] = options.sequence;
  result["batch"] = options.batch;
  result["hidden"] = options.hidden;
  result["heads"] = options.heads;
  result["kv_heads"] = options.kv_heads > 0 ? options.kv_heads : options.heads;
  result["intermediate"] = options.intermediate;
  result["vocab"] = options.vocab;
  result["dtype"] = options.dtype;
  result["steps"] = options.steps;
  result["warmup"] = options.warmup;
  result["device"] = options.device;
  result["lora_rank"] = options.lora_rank;
  result["optimizer"] = options.optimizer ? "adamw" : "none";
  result["loss"] = options.loss;
  result["fused_adamw"] = options.fused_adamw;
  result["base_dtype"] = options.base_dtype;
  result["quantize_base"] = options.quantize_base;
  result["fused_rms_norm"] = options.device == "cuda" && tune::nn::fused_rms_norm_enabled();

  tune::memory::Policy policy;
  tune::precision::MixedPrecision precision;
  try {
    policy = tune::memory::parse_policy(options.policy);
    if (options.dtype != "bf16" && options.dtype != "fp32") {
      throw tune::UsageError("--dtype: expected bf16 or fp32, got '" + options.dtype + "'");
    }
    precision = options.dtype == "bf16" ? tune::precision::MixedPrecision::bf16 : tune::precision::MixedPrecision::no;
    if (options.device != "cpu" && options.device != "cuda") {
      throw tune::UsageError("--device: expected cpu or cuda, got '" + options.device + "'");
    }
    if (options.device == "cuda" && !torch::cuda::is_available()) throw tune::UsageError("--device cuda: no CUDA device");
    if (options.loss != "plain" && options.loss != "fused") {
      throw tune::UsageError("--loss: expected plain or fused, got '" + options.loss + "'");
    }
    if (options.fused_adamw != "auto" && options.fused_adamw != "on" && options.fused_adamw != "off") {
      throw tune::UsageError("--fused-adamw: expected auto, on or off, got '" + options.fused_adamw + "'");
    }
    if (options.compact_gradients != "auto" && options.compact_gradients != "on" && options.compact_gradients != "off") {
      throw tune::UsageError("--compact-gradients: expected auto, on or off, got '" + options.compact_gradients + "'");
    }
    if (options.compact_gradients == "on" && (!options.optimizer || options.device != "cpu" || options.dtype != "bf16")) {
      throw tune::UsageError("--compact-gradients on: needs --optimizer, --device cpu and --dtype bf16");
    }
    if (options.base_dtype != "fp32" && options.base_dtype != "bf16") {
      throw tune::UsageError("--base-dtype: expected fp32 or bf16, got '" + options.base_dtype + "'");
    }
    if (options.quantize_base != "none" && options.quantize_base != "nf4") {
      throw tune::UsageError("--quantize-base: expected none or nf4, got '" + options.quantize_base + "'");
    }
    if (options.cuda_graph && (options.device != "cuda" || !options.optimizer)) {
      throw tune::UsageError("--cuda-graph captures a whole training step on the GPU: it needs --device cuda and "
                             "--optimizer");
    }
    if (options.cuda_graph && !options.profile.empty()) {
      throw tune::UsageError("--cuda-graph and --profile: profile the eager step (a replay is one launch)");
    }
    if (options.quantize_base == "nf4" && options.lora_rank <= 0) {
      throw tune::UsageError("--quantize-base nf4 needs --lora-rank > 0 (QLoRA trains adapters on a frozen base)");
    }
  } catch (const tune::Error& error) {
    result["error"] = error.what();
    std::cout << result.dump() << std::endl;
    return 3;
  }

  // Before any large allocation, so every tensor of the step is counted.
  tune::memory_tracker::install();
  result["threads"] = tune::configure_threads(options.threads);
  torch::manual_seed(options.seed);

  tune::models::LlamaConfig config;
  config.vocab_size = options.vocab;
  config.hidden_size = options.hidden;
  config.intermediate_size = options.intermediate;
  config.num_hidden_layers = options.layers;
  config.num_attention_heads = options.heads;
  config.num_key_value_heads = options.kv_heads > 0 ? options.kv_heads : options.heads;
  config.max_position_embeddings = std::max<int64_t>(options.sequence, 2048);
  config.tie_word_embeddings = options.tie_embeddings;
  config.rope_theta = options.rope_theta;
  tune::models::LlamaLoraOptions lora;
  lora.lora.rank = options.lora_rank;
  lora.lora.alpha = 2.0 * static_cast<double>(options.lora_rank);
  lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  if (options.lora_rank > 0 && options.base_dtype == "bf16") lora.base_dtype = torch::kBFloat16;
  if (options.quantize_base == "nf4") {
    lora.nf4_modules = lora.target_modules;
    lora.double_quant = options.double_quant;
  }
  tune::models::LlamaForCausalLM model(config, lora);
  if (options.lora_rank > 0) model->freeze_base_weights();
  const torch::Device device = options.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  model->to(device);
  if (options.quantize_base == "nf4") quantize_random_bases(*model, options.base_dtype, options.double_quant);
  model->train();
  // As tune train does: the CPU kernels measured (or read from the cache) on this step's shapes.
  const auto step_dtype = options.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
  tune::recipes::choose_cpu_kernels(
      tune::recipes::llama_workload(config, options.batch, options.sequence, step_dtype, /*training=*/true), device);
  result["cpu_gemm"] = tune::precision::describe_cpu_gemm();
  result["cpu_fused_attention"] = tune::nn::uses_fused_attention(device.type(), step_dtype);
  result["attention_chunk_min_rows"] = tune::attention_chunk_min_rows();
  std::unique_ptr<tune::train::AdamW> optimizer;
  if (options.optimizer) {
    std::vector<tune::train::NamedParameter> trainable;
    for (const auto& named : model->named_parameters()) {
      if (named.value().requires_grad()) trainable.push_back({named.key(), named.value()});
    }
    tune::train::AdamWOptions adamw;
    adamw.kernel = options.fused_adamw == "on"    ? tune::train::AdamWKernel::fused
                   : options.fused_adamw == "off" ? tune::train::AdamWKernel::sliced
                                                  : tune::train::AdamWKernel::automatic;
    result["adamw_kernel"] = tune::train::adamw_uses_fused_kernel(adamw, torch::kFloat, device) ? "fused" : "sliced";
    optimizer = std::make_unique<tune::train::AdamW>(tune::train::make_param_groups(trainable, 0.0), adamw);
  }
  // As tune train's training.compact_gradients (recipes/gradient_storage.h): gradients held as exact bf16 copies.
  std::unique_ptr<tune::train::CompactGradients> compact;
  const bool compact_auto = options.compact_gradients == "auto" && options.optimizer && device.is_cpu() &&
                            options.dtype == "bf16" && policy != tune::memory::Policy::off;
  if (options.compact_gradients == "on" || compact_auto) {
    std::vector<torch::Tensor> trainable;
    for (const auto& parameter : model->parameters()) {
      if (parameter.requires_grad()) trainable.push_back(parameter);
    }
    compact = std::make_unique<tune::train::CompactGradients>(trainable);
  }
  result["compact_gradients"] = compact != nullptr;

  tune::memory::CheckpointOptions checkpoint_options;
  checkpoint_options.policy = policy;
  checkpoint_options.k = options.k;
  std::shared_ptr<tune::memory::CheckpointRunner> runner;
  try {
    runner = std::make_shared<tune::memory::CheckpointRunner>(checkpoint_options, config.num_hidden_layers);
  } catch (const tune::Error& error) {
    result["error"] = error.what();
    std::cout << result.dump() << std::endl;
    return 3;
  }
  model->set_block_runner(runner);
  result["checkpointing"] = runner->describe();
  result["checkpointed_blocks"] = runner->checkpointed_blocks();

  const auto input_ids = torch::randint(0, config.vocab_size, {options.batch, options.sequence}, torch::kLong).to(device);
  const auto labels = torch::randint(0, config.vocab_size, {options.batch, options.sequence}, torch::kLong).to(device);

  int64_t parameter_bytes = 0, parameters = 0, trainable_parameters = 0;
  for (const auto& parameter : model->parameters()) {
    parameter_bytes += parameter.numel() * parameter.element_size();
    parameters += parameter.numel();
    if (parameter.requires_grad()) trainable_parameters += parameter.numel();
  }
  result["parameter_bytes"] = parameter_bytes;
  result["parameters"] = parameters;
  result["trainable_parameters"] = trainable_parameters;
  const int64_t rss_before = current_rss_bytes();

  std::vector<double> seconds, forward_seconds;
  int64_t activation_bytes = 0, peak_live_bytes = 0;
  double loss = 0.0;
  result["cuda_graph"] = options.cuda_graph;
  if (options.cuda_graph) {
    const GraphSteps graph = run_graph_steps(model, input_ids, labels, precision, options, *optimizer);
    seconds = graph.seconds;
    loss = graph.loss;
    peak_live_bytes = graph.capture_peak_bytes;
    activation_bytes = graph.capture_peak_bytes - graph.live_before_capture;
    result["graph_pool_reserved_bytes"] = graph.pool_reserved_bytes;
  }
  for (int i = 0; i < options.warmup && !options.cuda_graph; ++i) {
    train_step(model, input_ids, labels, precision, options, optimizer.get(), compact.get());
  }
  for (int i = 0; i < options.steps && !options.cuda_graph; ++i) {
    const StepResult step = train_step(model, input_ids, labels, precision, options, optimizer.get(), compact.get());
    seconds.push_back(step.seconds);
    forward_seconds.push_back(step.forward_seconds);
    activation_bytes = std::max(activation_bytes, step.activation_bytes);
    peak_live_bytes = std::max(peak_live_bytes, step.peak_live_bytes);
    loss = step.loss;
  }

  if (!options.profile.empty() && options.device == "cuda") {
    // On CUDA, Kineto (CUPTI): the step's GPU kernels with their device times beside the CPU-side ops, since what a
    // step costs there is kernel time the CPU-side profile cannot show. scripts/bench_profile_summary.py --cat
    // kernel sums the kernels.
    namespace profiler = torch::autograd::profiler;
    using torch::profiler::impl::ActivityType;
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
    train_step(model, input_ids, labels, precision, options, optimizer.get(), compact.get());
    torch::cuda::synchronize();
    profiler::disableProfiler()->save(options.profile);
  } else if (!options.profile.empty()) {
    // Legacy autograd profiler (present in 1.13 and 2.x): a Chrome-trace file of every op of one step;
    // scripts/bench_profile_summary.py sums it per op.
    torch::autograd::profiler::RecordProfile profile(options.profile);
    train_step(model, input_ids, labels, precision, options, optimizer.get(), compact.get());
  }

  // The analytic side: the estimate for this policy and layout, and the floor policy full aims at (every block's
  // fp32 input kept, plus one block's working set while it is recomputed and differentiated).
  // The attention cores that ran (as sft_train.cpp asks): plainly run, recomputed and selective's layers may each
  // take another (nn::attention_core_form).
  tune::recipes::sft::ActivationShape shape{options.batch, options.sequence, options.dtype == "bf16" ? 2 : 4};
  const auto device_type = options.device == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  const auto compute_dtype = options.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
  shape.lora = lora;
  const tune::recipes::RunnerStacks stacks = tune::recipes::sft::llama_stacks(config, shape, device_type, compute_dtype);
  const int64_t estimate = tune::recipes::estimate_for_runner(stacks.plain, stacks.selective, *runner);
  const int64_t block_inputs = options.layers * options.batch * options.sequence * options.hidden * 4;
  // Policy full's floor: a layer's working set as its recompute runs it.
  shape.attention_core = tune::nn::attention_core_form(device_type, compute_dtype, /*kept_until_backward=*/false);
  const int64_t layer_bytes = tune::recipes::sft::estimate_layer_working_set_bytes(config, shape);

  result["step_s"] = median(seconds);
  // The minimum is the figure least disturbed by other processes on a shared machine; ratios use it.
  result["step_s_min"] = seconds.empty() ? 0.0 : *std::min_element(seconds.begin(), seconds.end());
  result["step_s_all"] = seconds;
  result["forward_s"] = median(forward_seconds);  // backward (with the recompute) is step_s - forward_s
  result["tokens_per_s"] = seconds.empty() ? 0.0 : options.batch * options.sequence / median(seconds);
  result["loss_sum"] = loss;
  result["activation_bytes"] = activation_bytes;
  result["tracked_peak_bytes"] = peak_live_bytes;
  result["estimate_bytes"] = estimate;
  result["measured_over_estimate"] = estimate > 0 ? static_cast<double>(activation_bytes) / estimate : 0.0;
  result["block_input_bytes"] = block_inputs;
  result["layer_working_set_bytes"] = layer_bytes;
  result["full_floor_bytes"] = block_inputs + layer_bytes;
  result["measured_over_full_floor"] = static_cast<double>(activation_bytes) / (block_inputs + layer_bytes);
  const int64_t rss_peak = peak_rss_bytes();
  result["rss_before_bytes"] = rss_before;
  result["rss_peak_bytes"] = rss_peak;
  result["rss_delta_bytes"] = rss_peak - rss_before;
  const auto blocks = tune::memory_tracker::cpu_block_cache_stats();
  result["cpu_block_cache"] = {{"mapped_bytes", blocks.mapped_bytes}, {"hits", blocks.hits},
                               {"misses", blocks.misses}, {"evictions", blocks.evictions},
                               {"reuses", blocks.reuses}};

  // The floor of full checkpointing, measured rather than estimated: the same model cut to one layer under full
  // checkpointing holds one block input, the recompute's whole working set (attention backward temporaries
  // included) and the head and loss; each further layer should only add its fp32 block input. (Run after the
  // RSS figures above, which it would otherwise disturb.)
  // (CPU only: the tracking allocator's per-step figures; and skipped with the optimizer, whose state would count.)
  if (policy == tune::memory::Policy::full && options.layers > 1 && options.device == "cpu" && !options.optimizer) {
    torch::manual_seed(options.seed);
    tune::models::LlamaConfig one_layer = config;
    one_layer.num_hidden_layers = 1;
    tune::models::LlamaForCausalLM single(one_layer);
    single->train();
    single->set_block_runner(std::make_shared<tune::memory::CheckpointRunner>(checkpoint_options, 1));
    for (int i = 0; i < options.warmup; ++i) train_step(single, input_ids, labels, precision, options, nullptr);
    int64_t single_bytes = 0;
    for (int i = 0; i < options.steps; ++i) {
      single_bytes =
          std::max(single_bytes, train_step(single, input_ids, labels, precision, options, nullptr).activation_bytes);
    }
    const int64_t input_bytes = options.batch * options.sequence * options.hidden * 4;
    const int64_t floor = single_bytes + (options.layers - 1) * input_bytes;
    result["one_layer_full_activation_bytes"] = single_bytes;
    result["measured_full_floor_bytes"] = floor;
    result["measured_over_measured_floor"] = static_cast<double>(activation_bytes) / static_cast<double>(floor);
  }
  std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions options;
  CLI::App app{"tune-bench: activation checkpointing memory and step time on a random Llama (one JSON line)"};
  app.add_option("--layers", options.layers, "decoder layers")->capture_default_str();
  app.add_option("--seq", options.sequence, "tokens per sequence")->capture_default_str();
  app.add_option("--batch", options.batch, "sequences per step")->capture_default_str();
  app.add_option("--hidden", options.hidden, "hidden size")->capture_default_str();
  app.add_option("--heads", options.heads, "attention heads")->capture_default_str();
  app.add_option("--kv-heads", options.kv_heads, "key/value heads (0: same as --heads)")->capture_default_str();
  app.add_option("--intermediate", options.intermediate, "MLP intermediate size")->capture_default_str();
  app.add_option("--vocab", options.vocab, "vocabulary size")->capture_default_str();
  app.add_option("--policy", options.policy, "off | full | every_k | sqrt | selective")->capture_default_str();
  app.add_option("--k", options.k, "every_k: checkpoint every k-th block")->capture_default_str();
  app.add_option("--steps", options.steps, "measured training steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "unmeasured steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--threads", options.threads, "intra-op threads (0: all cores)")->capture_default_str();
  app.add_option("--dtype", options.dtype, "bf16 (autocast) | fp32")->capture_default_str();
  app.add_option("--seed", options.seed, "RNG seed for weights and tokens")->capture_default_str();
  app.add_option("--profile", options.profile, "also profile one step: write its Chrome trace (JSON) here");
  app.add_option("--device", options.device, "cpu | cuda")->capture_default_str();
  app.add_option("--lora-rank", options.lora_rank, "LoRA rank on every projection (0: full fine-tune)")
      ->capture_default_str();
  app.add_flag("--optimizer", options.optimizer, "include an AdamW update in each step");
  app.add_option("--loss", options.loss, "plain | fused (chunked linear cross-entropy)")->capture_default_str();
  app.add_flag("--tie-embeddings", options.tie_embeddings, "lm_head shares the embedding matrix");
  app.add_option("--fused-adamw", options.fused_adamw, "auto | on | off (optimizer.fused)")->capture_default_str();
  app.add_option("--compact-gradients", options.compact_gradients,
                 "auto | on | off (training.compact_gradients; auto: with --optimizer on the CPU, bf16, checkpointing)")
      ->capture_default_str();
  app.add_option("--base-dtype", options.base_dtype, "LoRA base storage: fp32 | bf16 (param_dtype)")
      ->capture_default_str();
  app.add_option("--quantize-base", options.quantize_base, "LoRA base: none | nf4 (QLoRA, every projection)")
      ->capture_default_str();
  app.add_option("--double-quant", options.double_quant, "with nf4: double quantisation (true | false)")
      ->capture_default_str();
  app.add_option("--rope-theta", options.rope_theta, "RoPE base")->capture_default_str();
  app.add_flag("--cuda-graph", options.cuda_graph,
               "capture the whole step (with --optimizer, on --device cuda) into a CUDA graph and replay it");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {
    nlohmann::json result{{"tool", "tune"}, {"policy", options.policy}, {"error", error.what()}};
    std::cout << result.dump() << std::endl;
    return 1;
  }
}
