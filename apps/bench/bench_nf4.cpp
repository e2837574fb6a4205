// tune-bench-nf4: QLoRA's frozen NF4 product on the CPU, forward (x W^T) and input gradient (g W), through
// nn::nf4_linear with each of its CPU paths side by side in one process: "fused" (precision/nf4_cpu_product: the
// weight dequantised a slice at a time into fp32 for sgemm) and "dequantize" (the whole weight dequantised to bf16,
// then the product through the CPU GEMM mode in force). One JSON line per (shape, path): the fastest of --repeat
// runs and the peak tensor bytes above the operands. Driven by scripts/bench_nf4_cpu.sh.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tune/compat/torch_compat.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/threads.h"
#include "tune/nn/nf4_linear.h"
#include "tune/precision/cpu_gemm.h"
#include "tune/precision/nf4.h"

int main(int argc, char** argv) {
  CLI::App app{"QLoRA's NF4 product on the CPU: the fused and dequantise paths side by side"};
  int64_t tokens = 2048;
  int repeat = 3, threads = 0;
  std::vector<std::string> shapes{"q_proj_1b:2048x2048", "gate_proj_1b:8192x2048", "down_proj_1b:2048x8192",
                                  "gate_proj_8b:14336x4096"};
  app.add_option("--tokens", tokens, "rows of the input (batch x sequence)");
  app.add_option("--repeat", repeat, "runs per path; the fastest is reported");
  app.add_option("--threads", threads, "intra-op threads (0: the machine's)");
  app.add_option("--shapes", shapes, "NAME:OUTxIN weights");
  CLI11_PARSE(app, argc, argv);
  tune::configure_threads(threads);
  tune::memory_tracker::install();
  tune::precision::install_cpu_gemm();
  torch::manual_seed(0);
  for (const auto& spec : shapes) {
    const auto colon = spec.find(':'), cross = spec.find('x', colon);
    const std::string name = spec.substr(0, colon);
    const int64_t out = std::stoll(spec.substr(colon + 1, cross - colon - 1)), in = std::stoll(spec.substr(cross + 1));
    const auto weight = tune::precision::quantize_nf4((torch::randn({out, in}) * 0.02).to(torch::kBFloat16), 64, true);
    const auto x = torch::randn({tokens, in}).to(torch::kBFloat16);
    const auto grad = torch::randn({tokens, out}).to(torch::kBFloat16);
    for (const char* path : {"fused", "dequantize"}) {
      setenv("TUNE_NF4_CPU", path, 1);
      double best = 1e30;
      int64_t peak = 0;
      for (int r = 0; r < repeat; ++r) {
        const auto input = x.detach().requires_grad_(true);
        tune::memory_tracker::reset_cpu_peak();
        const int64_t before = tune::memory_tracker::cpu_live_bytes();
        const auto start = std::chrono::steady_clock::now();
        {
          const bool was = tune::compat::autocast_cpu_enabled();
          tune::compat::set_autocast_cpu_enabled(true);
          tune::compat::set_autocast_cpu_dtype(torch::kBFloat16);
          const auto y = tune::nn::nf4_linear(input, weight);
          tune::compat::set_autocast_cpu_enabled(was);
          y.backward(grad);
        }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        peak = std::max(peak, tune::memory_tracker::cpu_peak_bytes() - before);
      }
      std::cout << nlohmann::json{{"shape", name},        {"out", out},   {"in", in},
                                  {"tokens", tokens},     {"path", path}, {"seconds", best},
                                  {"peak_bytes", peak},   {"gemm", tune::precision::describe_cpu_gemm()}}
                       .dump()
                << std::endl;
    }
  }
  return 0;
}
