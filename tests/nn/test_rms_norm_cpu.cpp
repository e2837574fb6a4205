// nn/rms_norm_cpu.h: RMSNorm's CPU kernels, forward and both gradients, against float64 autograd of the formula
// they replace (weight * x * rsqrt(mean(x^2) + eps), Gemma's (1 + weight) form), through nn::RMSNorm as the models
// call it. Widths that are not a multiple of the vector lanes, row counts over a block of rows, rows of very
// different scales, a frozen weight (LoRA), and two threads (the weight's gradient summed in parts).
#include <ATen/Parallel.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <string>

#include "tune/nn/rms_norm.h"
#include "tune/nn/rms_norm_cpu.h"

namespace {

torch::Tensor float64_of(const torch::Tensor& t) { return t.detach().to(torch::kFloat64); }

// The largest error of `got` against `want`, relative to want's largest magnitude.
double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return (float64_of(got) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

struct Case {
  std::vector<int64_t> sizes;
  bool zero_centred;
  bool weight_trainable;
};

void check_case(const Case& c) {
  const int64_t width = c.sizes.back();
  tune::nn::RMSNorm norm(tune::nn::RMSNormOptions(width).eps(1e-5).zero_centred(c.zero_centred));
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_((c.zero_centred ? 0.0 : 1.0) + 0.3 * torch::randn({width}));
  }
  norm->weight.requires_grad_(c.weight_trainable);
  auto x = torch::randn(c.sizes);
  {
    // Rows of very different scales: the eps term matters for the small ones.
    auto rows = x.view({-1, width});
    rows.slice(0, 0, 1).mul_(100.0);
    rows.slice(0, 1, 2).mul_(1e-3);
  }
  x.requires_grad_(true);
  REQUIRE(tune::nn::rms_norm_cpu_fits(x, norm->weight));
  const auto y = norm(x);
  REQUIRE(y.scalar_type() == torch::kFloat32);
  REQUIRE(std::string(y.grad_fn()->name()).find("CpuRmsNorm") != std::string::npos);
  const auto grad = torch::randn(c.sizes);
  y.backward(grad);

  const auto x64 = float64_of(x).requires_grad_(true);
  const auto w64 = float64_of(norm->weight).requires_grad_(true);
  const auto scale64 = c.zero_centred ? w64 + 1.0 : w64;
  const auto y64 = scale64 * (x64 * torch::rsqrt(x64.pow(2).mean(-1, true) + 1e-5));
  y64.backward(float64_of(grad));

  CHECK(relative_error(y, y64.detach()) < 1e-6);
  CHECK(relative_error(x.grad(), x64.grad()) < 1e-5);
  if (c.weight_trainable) {
    CHECK(relative_error(norm->weight.grad(), w64.grad()) < 1e-5);
  } else {
    CHECK_FALSE(norm->weight.grad().defined());
  }
}

}  // namespace

TEST_CASE("RMSNorm's CPU kernels match float64 autograd of the formula", "[nn][rms_norm]") {
  torch::manual_seed(3);
  const int threads = at::get_num_threads();
  for (const int run_threads : {1, 2}) {
    at::set_num_threads(run_threads);
    for (const Case& c : {Case{{3, 5, 8}, false, true}, Case{{2, 100, 37}, false, true},
                          Case{{4, 70, 64}, true, true}, Case{{300, 256}, false, false},
                          Case{{2, 3, 17}, true, false}}) {
      INFO(run_threads << " thread(s), width " << c.sizes.back() << (c.zero_centred ? ", zero-centred" : "")
                       << (c.weight_trainable ? "" : ", frozen weight"));
      check_case(c);
    }
  }
  at::set_num_threads(threads);
}

TEST_CASE("RMSNorm takes the CPU kernels only for fp32 inputs and weights", "[nn][rms_norm]") {
  const auto weight = torch::ones({8});
  CHECK(tune::nn::rms_norm_cpu_fits(torch::randn({2, 8}), weight));
  CHECK_FALSE(tune::nn::rms_norm_cpu_fits(torch::randn({2, 8}).to(torch::kBFloat16), weight));
  CHECK_FALSE(tune::nn::rms_norm_cpu_fits(torch::randn({2, 8}, torch::kFloat64), weight));
  CHECK_FALSE(tune::nn::rms_norm_cpu_fits(torch::randn({2, 8}), weight.to(torch::kBFloat16)));
  CHECK_FALSE(tune::nn::rms_norm_cpu_fits(torch::randn({8, 2}).t(), weight));  // not contiguous
  CHECK_FALSE(tune::nn::rms_norm_cpu_fits(torch::randn({2, 4}), weight));      // width mismatch
  // A bf16 input (Qwen3's q_norm under autocast, a bf16 residual stream) keeps the op-by-op form.
  tune::nn::RMSNorm norm(tune::nn::RMSNormOptions(8));
  const auto y = norm(torch::randn({2, 8}).to(torch::kBFloat16).requires_grad_(true));
  CHECK(std::string(y.grad_fn()->name()).find("CpuRmsNorm") == std::string::npos);
}
