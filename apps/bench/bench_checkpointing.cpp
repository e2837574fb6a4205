// tune-bench: memory and speed of one activation-checkpointing policy on a random Llama, as one JSON line.
// Each run is meant to be a fresh process (scripts/bench_checkpointing.sh runs policies side by side), so that
// peak RSS belongs to one configuration; the tracked activation peak is measured the way
// tests/recipes/test_checkpointing_memory.cpp measures it, and set beside the analytic estimate of memory_report.h.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_legacy.h>
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
#include "tune/core/memory_tracker.h"
#include "tune/core/threads.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/precision/cpu_gemm.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/sft/memory_report.h"
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
};

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

// One training step without an optimizer: forward under the precision scope, summed next-token loss, backward.
// Gradients from earlier steps are zeroed in place so backward accumulates into existing storage, as in training.
StepResult train_step(tune::models::LlamaForCausalLM& model, const torch::Tensor& input_ids,
                      const torch::Tensor& labels, tune::precision::MixedPrecision precision) {
  for (auto& parameter : model->parameters()) {
    if (parameter.grad().defined()) parameter.mutable_grad().zero_();
  }
  const int64_t before = tune::memory_tracker::cpu_live_bytes();
  tune::memory_tracker::reset_cpu_peak();
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor loss;
  {
    tune::precision::AutocastScope autocast(precision, torch::kCPU);
    loss = tune::train::causal_lm_loss_sum(model->forward(input_ids), labels);
  }
  const auto forward_end = std::chrono::steady_clock::now();
  loss.backward();
  const auto end = std::chrono::steady_clock::now();
  const int64_t peak = tune::memory_tracker::cpu_peak_bytes();
  return {std::chrono::duration<double>(end - start).count(),
          std::chrono::duration<double>(forward_end - start).count(), peak - before, peak, loss.item<double>()};
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

  tune::memory::Policy policy;
  tune::precision::MixedPrecision precision;
  try {
    policy = tune::memory::parse_policy(options.policy);
    if (options.dtype != "bf16" && options.dtype != "fp32") {
      throw tune::UsageError("--dtype: expected bf16 or fp32, got '" + options.dtype + "'");
    }
    precision = options.dtype == "bf16" ? tune::precision::MixedPrecision::bf16 : tune::precision::MixedPrecision::no;
  } catch (const tune::Error& error) {
    result["error"] = error.what();
    std::cout << result.dump() << std::endl;
    return 3;
  }

  // Before any large allocation, so every tensor of the step is counted.
  tune::memory_tracker::install();
  tune::precision::install_cpu_gemm();
  result["cpu_gemm"] = tune::precision::describe_cpu_gemm();
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
  tune::models::LlamaForCausalLM model(config);
  model->train();

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

  const auto input_ids = torch::randint(0, config.vocab_size, {options.batch, options.sequence}, torch::kLong);
  const auto labels = torch::randint(0, config.vocab_size, {options.batch, options.sequence}, torch::kLong);

  int64_t parameter_bytes = 0;
  for (const auto& parameter : model->parameters()) parameter_bytes += parameter.numel() * parameter.element_size();
  result["parameter_bytes"] = parameter_bytes;
  const int64_t rss_before = current_rss_bytes();

  for (int i = 0; i < options.warmup; ++i) train_step(model, input_ids, labels, precision);
  std::vector<double> seconds, forward_seconds;
  int64_t activation_bytes = 0, peak_live_bytes = 0;
  double loss = 0.0;
  for (int i = 0; i < options.steps; ++i) {
    const StepResult step = train_step(model, input_ids, labels, precision);
    seconds.push_back(step.seconds);
    forward_seconds.push_back(step.forward_seconds);
    activation_bytes = std::max(activation_bytes, step.activation_bytes);
    peak_live_bytes = std::max(peak_live_bytes, step.peak_live_bytes);
    loss = step.loss;
  }

  if (!options.profile.empty()) {
    // Legacy autograd profiler (present in 1.13 and 2.x): a Chrome-trace file of every op of one step;
    // scripts/bench_profile_summary.py sums it per op.
    torch::autograd::profiler::RecordProfile profile(options.profile);
    train_step(model, input_ids, labels, precision);
  }

  // The analytic side: the estimate for this policy and layout, and the floor policy full aims at (every block's
  // fp32 input kept, plus one block's working set while it is recomputed and differentiated).
  const tune::recipes::sft::ActivationShape shape{options.batch, options.sequence, options.dtype == "bf16" ? 2 : 4};
  const int64_t estimate = tune::recipes::estimate_for_runner(tune::recipes::sft::llama_stack(config, shape, false),
                                                              tune::recipes::sft::llama_stack(config, shape, true),
                                                              *runner);
  const int64_t block_inputs = options.layers * options.batch * options.sequence * options.hidden * 4;
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

  // The floor of full checkpointing, measured rather than estimated: the same model cut to one layer under full
  // checkpointing holds one block input, the recompute's whole working set (attention backward temporaries
  // included) and the head and loss; each further layer should only add its fp32 block input. (Run after the
  // RSS figures above, which it would otherwise disturb.)
  if (policy == tune::memory::Policy::full && options.layers > 1) {
    torch::manual_seed(options.seed);
    tune::models::LlamaConfig one_layer = config;
    one_layer.num_hidden_layers = 1;
    tune::models::LlamaForCausalLM single(one_layer);
    single->train();
    single->set_block_runner(std::make_shared<tune::memory::CheckpointRunner>(checkpoint_options, 1));
    for (int i = 0; i < options.warmup; ++i) train_step(single, input_ids, labels, precision);
    int64_t single_bytes = 0;
    for (int i = 0; i < options.steps; ++i) {
      single_bytes = std::max(single_bytes, train_step(single, input_ids, labels, precision).activation_bytes);
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
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {
    nlohmann::json result{{"tool", "tune"}, {"policy", options.policy}, {"error", error.what()}};
    std::cout << result.dump() << std::endl;
    return 1;
  }
}
