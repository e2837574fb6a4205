// tune-bench-attention: the attention core alone (forward + backward), tune's two autograd forms beside
// LibTorch's fused at::scaled_dot_product_attention, one JSON line per configuration. Driven by
// scripts/bench_attention.sh, which runs the implementations side by side in one process per configuration.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "tune/core/memory_tracker.h"
#include "tune/core/threads.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/attention_mask.h"
#include "tune/precision/cpu_gemm.h"

namespace {

struct Options {
  std::vector<int64_t> sequences{256, 1024, 2048, 4096};
  std::vector<std::string> masks{"causal", "packed"};
  std::vector<std::string> dtypes{"bf16", "fp32"};
  std::vector<std::string> impls{"plain", "recomputing", "sdpa"};
  int64_t batch = 1, heads = 4, kv_heads = 4, head_dim = 64;
  int repeat = 3;
  int threads = 2;
};

// Segment ids for a packed row: three documents of roughly equal length (the SFT packer's layout).
torch::Tensor packed_segments(int64_t batch, int64_t length) {
  return (torch::arange(length) * 3 / length).unsqueeze(0).expand({batch, length}).contiguous();
}

struct Measurement {
  double seconds = 1e30;         // fastest forward + backward
  int64_t saved_bytes = 0;       // tensor bytes alive between forward and backward beyond q, k, v and the mask
  int64_t peak_bytes = 0;        // peak tensor bytes during forward + backward beyond q, k, v and the mask
};

Measurement measure(const std::string& impl, const Options& options, int64_t length, const std::string& mask_kind,
                    torch::ScalarType dtype) {
  const auto segments = mask_kind == "packed" ? packed_segments(options.batch, length) : torch::Tensor();
  const auto additive = tune::nn::make_causal_mask(length, 0, segments, torch::kCPU);
  // SDPA takes a boolean mask (true = may attend) in any dtype; 1 byte per score against the additive mask's 2.
  const auto allowed = tune::nn::make_causal_allowed(length, 0, segments, torch::kCPU).unsqueeze(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(options.head_dim));
  auto make = [&](int64_t heads) {
    return torch::randn({options.batch, heads, length, options.head_dim}).to(dtype).requires_grad_(true);
  };
  const auto query = make(options.heads), key = make(options.kv_heads), value = make(options.kv_heads);
  auto forward = [&]() -> torch::Tensor {
    if (impl == "plain") return tune::nn::attention_core(query, key, value, additive, scale);
    if (impl == "recomputing") {
      return tune::nn::attention_core_recomputing_probabilities(query, key, value, additive, scale);
    }
    const bool is_causal = mask_kind == "causal";  // the kernel's own causal masking: no mask tensor at all
    return at::scaled_dot_product_attention(query, key, value, is_causal ? c10::optional<torch::Tensor>() : allowed,
                                            0.0, is_causal, scale, options.kv_heads != options.heads);
  };
  Measurement result;
  for (int r = 0; r < options.repeat + 1; ++r) {  // the first run warms up and is not timed
    for (const auto* t : {&query, &key, &value}) t->mutable_grad() = torch::Tensor();
    const int64_t base = tune::memory_tracker::cpu_live_bytes();
    tune::memory_tracker::reset_cpu_peak();
    const auto start = std::chrono::steady_clock::now();
    auto output = forward();
    const int64_t after_forward = tune::memory_tracker::cpu_live_bytes();
    output.backward(torch::ones_like(output));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r == 0) continue;
    result.seconds = std::min(result.seconds, seconds);
    result.saved_bytes = after_forward - base - output.nbytes();
    result.peak_bytes = tune::memory_tracker::cpu_peak_bytes() - base;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"tune-bench-attention: attention core forward + backward, tune's forms vs LibTorch's SDPA"};
  app.add_option("--seq", options.sequences, "sequence lengths")->capture_default_str();
  app.add_option("--mask", options.masks, "causal | packed (three documents per row)")->capture_default_str();
  app.add_option("--dtype", options.dtypes, "bf16 | fp32")->capture_default_str();
  app.add_option("--impl", options.impls, "plain | recomputing | sdpa")->capture_default_str();
  app.add_option("--batch", options.batch)->capture_default_str();
  app.add_option("--heads", options.heads)->capture_default_str();
  app.add_option("--kv-heads", options.kv_heads)->capture_default_str();
  app.add_option("--head-dim", options.head_dim)->capture_default_str();
  app.add_option("--repeat", options.repeat, "timed runs per configuration (fastest kept)")->capture_default_str();
  app.add_option("--threads", options.threads)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  tune::memory_tracker::install();
  tune::precision::install_cpu_gemm();
  tune::configure_threads(options.threads);
  torch::manual_seed(0);
  for (const auto length : options.sequences) {
    for (const auto& mask : options.masks) {
      for (const auto& dtype_name : options.dtypes) {
        const auto dtype = dtype_name == "bf16" ? torch::kBFloat16 : torch::kFloat32;
        for (const auto& impl : options.impls) {
          const auto m = measure(impl, options, length, mask, dtype);
          nlohmann::json line{{"impl", impl},          {"seq", length},
                              {"mask", mask},          {"dtype", dtype_name},
                              {"seconds", m.seconds},  {"saved_bytes", m.saved_bytes},
                              {"peak_bytes", m.peak_bytes}, {"cpu_gemm", tune::precision::describe_cpu_gemm()}};
          std::cout << line.dump() << std::endl;
        }
      }
    }
  }
  return 0;
}
