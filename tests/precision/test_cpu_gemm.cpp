// precision/cpu_gemm.h: bf16/fp16 products through fp32 kernels. Every operator it replaces (mm, bmm, addmm,
// baddbmm and their out= forms, reached through matmul, linear and autograd) against a float64 reference rounded
// once to the operands' dtype; fp32 and mixed-dtype calls behave as LibTorch's own kernels.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <array>
#include <functional>
#include <vector>

#include "common/scoped_env.h"
#include "tune/precision/cpu_gemm.h"
#include "tune/precision/mixed_precision.h"

using tune::precision::CpuGemmMode;

namespace {

bool fp32_path_for(torch::ScalarType dtype) {
  const CpuGemmMode mode = dtype == torch::kBFloat16 ? tune::precision::cpu_gemm_mode_for_bf16()
                                                     : tune::precision::cpu_gemm_mode_for_fp16();
  return mode == CpuGemmMode::fp32_accumulate;
}

// At most one unit in the last place of `dtype` apart, relative to the reference's magnitude: fp32 accumulation
// and float64 can round a sum to neighbouring low-precision values, never further.
void check_within_one_ulp(const torch::Tensor& result, const torch::Tensor& reference64, torch::ScalarType dtype) {
  REQUIRE(result.scalar_type() == dtype);
  REQUIRE(result.sizes() == reference64.sizes());
  const double ulp = dtype == torch::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;  // 2^-7 (bf16), 2^-10 (fp16) relative
  const auto error = (result.to(torch::kFloat64) - reference64).abs();
  const auto allowed = reference64.abs().clamp_min(1.0) * ulp;
  CHECK((error <= allowed).all().item<bool>());
}

// Runs `op` and returns how many products took the fp32-accumulate path meanwhile.
int64_t fp32_calls_during(const std::function<void()>& op) {
  const int64_t before = tune::precision::cpu_gemm_fp32_accumulate_calls();
  op();
  return tune::precision::cpu_gemm_fp32_accumulate_calls() - before;
}

}  // namespace

TEST_CASE("low-precision products equal a float64 product rounded once, through every replaced operator",
          "[precision][cpu_gemm]") {
  tune::precision::install_cpu_gemm();
  torch::manual_seed(0);
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    INFO("dtype " << dtype);
    const auto a = torch::randn({37, 64}).to(dtype);
    const auto b = torch::randn({64, 29}).to(dtype);
    const auto bias = torch::randn({29}).to(dtype);
    const auto batch_a = torch::randn({3, 17, 64}).to(dtype);
    const auto batch_b = torch::randn({3, 64, 11}).to(dtype);
    const auto batch_bias = torch::randn({3, 17, 11}).to(dtype);
    auto d = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };

    int64_t calls = fp32_calls_during([&] {
      check_within_one_ulp(torch::mm(a, b), torch::mm(d(a), d(b)), dtype);
      check_within_one_ulp(torch::bmm(batch_a, batch_b), torch::bmm(d(batch_a), d(batch_b)), dtype);
      check_within_one_ulp(torch::addmm(bias, a, b, 0.5, 2.0), torch::addmm(d(bias), d(a), d(b), 0.5, 2.0), dtype);
      check_within_one_ulp(torch::baddbmm(batch_bias, batch_a, batch_b, 0.5, 2.0),
                           torch::baddbmm(d(batch_bias), d(batch_a), d(batch_b), 0.5, 2.0), dtype);
      // matmul of [B, T, K] x [K, N] folds into mm; linear with a bias goes through addmm.
      check_within_one_ulp(torch::matmul(batch_a, b), torch::matmul(d(batch_a), d(b)), dtype);
      check_within_one_ulp(torch::linear(a, b.t(), bias), torch::linear(d(a), d(b).t(), d(bias)), dtype);
      // Operands stored transposed (cblas reads them as such) or with no unit stride (copied contiguous first).
      const auto strided = torch::randn({37, 128}).to(dtype).slice(1, 0, 128, 2);
      check_within_one_ulp(torch::mm(b.t(), a.t()), torch::mm(d(b).t(), d(a).t()), dtype);
      check_within_one_ulp(torch::mm(strided, b), torch::mm(d(strided), d(b)), dtype);
      // An empty inner dimension (outside MKL's interface: the converting fallback): beta * bias, or zeros.
      const auto empty_lhs = torch::empty({37, 0}, a.options()), empty_rhs = torch::empty({0, 29}, a.options());
      CHECK(torch::equal(torch::mm(empty_lhs, empty_rhs), torch::zeros({37, 29}, a.options())));
      check_within_one_ulp(torch::addmm(bias, empty_lhs, empty_rhs, 0.5), (d(bias) * 0.5).expand({37, 29}), dtype);
      auto out = torch::empty({0}, a.options());
      torch::mm_out(out, a, b);
      check_within_one_ulp(out, torch::mm(d(a), d(b)), dtype);
      auto batch_out = torch::empty({0}, a.options());
      torch::baddbmm_out(batch_out, batch_bias, batch_a, batch_b);
      check_within_one_ulp(batch_out, torch::baddbmm(d(batch_bias), d(batch_a), d(batch_b)), dtype);
    });
    if (fp32_path_for(dtype)) CHECK(calls >= 12);
    else CHECK(calls == 0);
  }
}

// The shapes that pick each way of the fp32-accumulate kernels (precision/cpu_gemm.cpp): few rows (the right
// operand read in place by MKL's mixed GEMM), many rows (row blocks, the right operand converted once), a long
// inner dimension (a weight gradient: slabs of it into a whole fp32 result, with and without a bias), and batches
// (groups of whole matrices, small and large). Every one against float64 rounded once.
TEST_CASE("every way through the fp32-accumulate kernels equals a float64 product rounded once",
          "[precision][cpu_gemm]") {
  tune::precision::install_cpu_gemm();
  const tune::testing::ScopedEnv fp32_gemm("TUNE_CPU_GEMM", "fp32");
  torch::manual_seed(3);
  if (fp32_calls_during([] { torch::mm(torch::ones({2, 2}, torch::kBFloat16), torch::ones({2, 2}, torch::kBFloat16)); }) == 0) {
    WARN("the replacement kernels are not installed on this CPU (native bf16 and fp16 GEMM): nothing to test");
    return;
  }
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    INFO("dtype " << dtype);
    auto d = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
    const std::vector<std::array<int64_t, 3>> shapes = {
        {8, 96, 40},      // few rows: in place
        {300, 96, 520},   // row blocks of 126 rows, b converted once
        {64, 1500, 32},   // a weight gradient: the inner dimension in slabs of 256
        {96, 2048, 384}}; // the same at Latte's width
    for (const auto& [m, k, n] : shapes) {
      INFO(m << " x " << k << " x " << n);
      const auto a = torch::randn({m, k}).to(dtype), b = torch::randn({k, n}).to(dtype);
      const auto bias = torch::randn({n}).to(dtype);
      const int64_t calls = fp32_calls_during([&] {
        check_within_one_ulp(torch::mm(a, b), torch::mm(d(a), d(b)), dtype);
        check_within_one_ulp(torch::mm(b.t(), a.t()), torch::mm(d(b).t(), d(a).t()), dtype);  // stored transposed
        check_within_one_ulp(torch::addmm(bias, a, b, 0.5, 2.0), torch::addmm(d(bias), d(a), d(b), 0.5, 2.0), dtype);
      });
      CHECK(calls == 3);
    }
    for (const auto& [batch, m, k, n] : std::vector<std::array<int64_t, 4>>{{700, 8, 16, 8}, {3, 300, 40, 260}}) {
      INFO(batch << " x " << m << " x " << k << " x " << n);
      const auto a = torch::randn({batch, m, k}).to(dtype), b = torch::randn({batch, k, n}).to(dtype);
      const auto bias = torch::randn({batch, m, n}).to(dtype);
      check_within_one_ulp(torch::bmm(a, b), torch::bmm(d(a), d(b)), dtype);
      check_within_one_ulp(torch::baddbmm(bias, a, b, 0.5, 2.0), torch::baddbmm(d(bias), d(a), d(b), 0.5, 2.0),
                           dtype);
    }
  }
}

TEST_CASE("fp32 products and mixed-dtype errors are LibTorch's own", "[precision][cpu_gemm]") {
  tune::precision::install_cpu_gemm();
  torch::manual_seed(1);
  const auto a = torch::randn({33, 48});
  const auto b = torch::randn({48, 21});
  const int64_t calls = fp32_calls_during([&] {
    const auto reference = torch::mm(a.to(torch::kFloat64), b.to(torch::kFloat64));
    CHECK(torch::allclose(torch::mm(a, b).to(torch::kFloat64), reference, 1e-5, 1e-5));
    CHECK(torch::allclose(torch::addmm(torch::ones({21}), a, b).to(torch::kFloat64), reference + 1, 1e-5, 1e-5));
    auto out = torch::empty({0});
    torch::mm_out(out, a, b);  // an empty out= tensor is resized, as LibTorch's out= forms do
    CHECK(out.sizes() == torch::IntArrayRef({33, 21}));
  });
  CHECK(calls == 0);
  CHECK_THROWS_WITH(torch::mm(a.to(torch::kBFloat16), b), Catch::Contains("dtype"));
  CHECK_THROWS_WITH(torch::mm(a, torch::randn({47, 3})), Catch::Contains("cannot be multiplied"));
}

TEST_CASE("bf16 autocast forward and backward of a linear layer take the replaced kernels", "[precision][cpu_gemm]") {
  tune::precision::install_cpu_gemm();
  torch::manual_seed(2);
  auto weight = torch::randn({24, 40}, torch::requires_grad());
  auto input = torch::randn({2, 9, 40}, torch::requires_grad());
  torch::Tensor output;
  const int64_t calls = fp32_calls_during([&] {
    tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
    output = torch::linear(input, weight);
    output.sum().backward();
  });
  REQUIRE(output.scalar_type() == torch::kBFloat16);
  // Forward, and the input's and weight's gradients: three products.
  if (fp32_path_for(torch::kBFloat16)) CHECK(calls >= 3);
  const auto input_bf16 = input.detach().to(torch::kBFloat16).to(torch::kFloat64);
  const auto weight_bf16 = weight.detach().to(torch::kBFloat16).to(torch::kFloat64);
  check_within_one_ulp(output.detach(), torch::linear(input_bf16, weight_bf16), torch::kBFloat16);
  // d(sum)/d(weight) = sum over rows of the input (ones as the incoming gradient), accumulated in fp32.
  const auto expected_weight_grad = input_bf16.reshape({-1, 40}).sum(0).expand({24, 40});
  CHECK(torch::allclose(weight.grad().to(torch::kFloat64), expected_weight_grad, 1e-2, 5e-2));
}
