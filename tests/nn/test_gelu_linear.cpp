// layer(gelu(x)) with GELU recomputed in backward, or kept and dropped early in backward (nn/gelu_linear.h), against
// autograd through the plain ops: the same values and gradients (float64 to rounding, bf16 autocast bit for bit), the
// [rows, inner] activation not kept from forward to backward (recomputing), backward's peak (keeping), and the form
// run_gelu_linear takes where.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <string>

#include "tune/core/cpu_gemm_mode.h"
#include "tune/core/memory_tracker.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/gelu_linear.h"
#include "tune/nn/gelu_tanh.h"
#include "tune/precision/cpu_gemm.h"
#include "tune/precision/mixed_precision.h"

namespace {

struct Layer {
  torch::nn::Linear linear{nullptr};
  torch::Tensor hidden;
};

// A [2, 5, 8] activation into an 8 -> 3 layer with bias.
Layer make_layer(torch::ScalarType dtype) {
  torch::manual_seed(21);
  Layer layer;
  layer.linear = torch::nn::Linear(torch::nn::LinearOptions(8, 3).bias(true));
  layer.linear->to(dtype);
  layer.hidden = torch::randn({2, 5, 8}, torch::TensorOptions().dtype(dtype)).requires_grad_();
  return layer;
}

// Gradients of (output * upstream).sum() for hidden, weight and bias.
std::vector<torch::Tensor> grads_of(const Layer& layer, const torch::Tensor& output, const torch::Tensor& upstream) {
  return torch::autograd::grad({output}, {layer.hidden, layer.linear->weight, layer.linear->bias}, {upstream});
}

torch::Tensor plain_form(const Layer& layer, const torch::Tensor& hidden) {
  return torch::linear(torch::gelu(hidden, "tanh"), layer.linear->weight, layer.linear->bias);
}

// The recomputing or the keeping form.
torch::Tensor custom_form(bool keeping, const torch::Tensor& hidden, const torch::Tensor& weight,
                          const torch::Tensor& bias) {
  return keeping ? tune::nn::gelu_linear_keeping(hidden, weight, bias)
                 : tune::nn::gelu_linear_recomputing(hidden, weight, bias);
}

}  // namespace

TEST_CASE("gelu_linear_recomputing and gelu_linear_keeping equal autograd through gelu and linear in float64",
          "[nn][gelu_linear]") {
  const bool keeping = GENERATE(false, true);
  CAPTURE(keeping);
  const Layer layer = make_layer(torch::kDouble);
  const auto upstream = torch::randn({2, 5, 3}, torch::kDouble);
  const auto expected = plain_form(layer, layer.hidden);
  const auto got = custom_form(keeping, layer.hidden, layer.linear->weight, layer.linear->bias);
  CHECK(torch::allclose(got, expected, 0.0, 1e-14));
  const auto expected_grads = grads_of(layer, expected, upstream);
  const auto got_grads = grads_of(layer, got, upstream);
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(torch::allclose(got_grads[i], expected_grads[i], 0.0, 1e-13));
  }
  // And against the explicit derivative of GELU's tanh form, d/dx [x/2 (1 + tanh(u))], u = sqrt(2/pi) (x + 0.044715 x^3).
  const auto x = layer.hidden.detach();
  const auto u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3));
  const auto t = u.tanh();
  const auto derivative = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * x * x);
  const auto by_formula = upstream.matmul(layer.linear->weight.detach()) * derivative;
  CHECK(torch::allclose(got_grads[0], by_formula, 0.0, 1e-12));
}

TEST_CASE("gelu_linear_recomputing and gelu_linear_keeping under bf16 autocast: the plain form's bits, backward "
          "outside the scope",
          "[nn][gelu_linear]") {
  const bool keeping = GENERATE(false, true);
  CAPTURE(keeping);
  // fp32 weights, a bf16 activation (as fc1's output under autocast): the product in bf16, the weight's and bias's
  // gradients fp32.
  Layer layer = make_layer(torch::kFloat);
  layer.hidden = layer.hidden.detach().to(torch::kBFloat16).requires_grad_();
  const auto upstream = torch::randn({2, 5, 3}).to(torch::kBFloat16);
  torch::Tensor plain, recomputing;
  {
    tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
    plain = plain_form(layer, layer.hidden);
    recomputing = custom_form(keeping, layer.hidden, layer.linear->weight, layer.linear->bias);
  }
  REQUIRE(plain.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(plain, recomputing));
  const auto expected = grads_of(layer, plain, upstream);
  const auto got = grads_of(layer, recomputing, upstream);
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(got[i].scalar_type() == expected[i].scalar_type());
    CHECK(torch::equal(got[i], expected[i]));
  }
}

TEST_CASE("gelu_linear_recomputing keeps the activation's input alone from forward to backward",
          "[nn][gelu_linear][memory]") {
  tune::memory_tracker::install();
  torch::manual_seed(22);
  const int64_t rows = 512, inner = 256, out = 4;
  const auto hidden = torch::randn({rows, inner}, torch::TensorOptions().requires_grad(true));
  const torch::nn::Linear layer(torch::nn::LinearOptions(inner, out).bias(true));
  const int64_t activation_bytes = rows * inner * 4;  // fp32
  auto held_after_forward = [&](bool recompute) {
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    const auto output = recompute ? tune::nn::gelu_linear_recomputing(hidden, layer->weight, layer->bias)
                                  : torch::linear(torch::gelu(hidden, "tanh"), layer->weight, layer->bias);
    const int64_t held = tune::memory_tracker::cpu_live_bytes() - before;
    output.sum().backward();
    return held;
  };
  const int64_t plain = held_after_forward(false);
  const int64_t recomputing = held_after_forward(true);
  INFO("held after forward: plain " << plain << " bytes, recomputing " << recomputing << " bytes");
  CHECK(plain >= activation_bytes);
  CHECK(recomputing <= rows * out * 4 + 4096);  // the output
}

TEST_CASE("gelu_linear_keeping under bf16 autocast: backward holds GELU's input and one gradient, plain also its output",
          "[nn][gelu_linear][memory]") {
  tune::memory_tracker::install();
  torch::manual_seed(23);
  const int64_t rows = 512, inner = 256, out = 4;
  // As fc1's output under autocast: a bf16 activation; fp32 weights.
  const auto hidden = torch::randn({rows, inner}).to(torch::kBFloat16).requires_grad_(true);
  const torch::nn::Linear layer(torch::nn::LinearOptions(inner, out).bias(true));
  const int64_t activation_bytes = rows * inner * 2;
  // tune's fp32-accumulate products, whatever this CPU's choice: on an AMX CPU LibTorch's bf16 kernel (its choice
  // there) makes about two copies of the weight gradient's transposed operand, GELU's output, at these sizes; they
  // then set both forms' peak and hide what this test is about: which of the block's own tensors are alive.
  tune::set_measured_cpu_gemm_mode(torch::kBFloat16, tune::CpuGemmMode::fp32_accumulate);
  tune::precision::install_cpu_gemm();  // a no-op where the CPU's guess already installed them
  // The peak in backward beyond what was live when it started (GELU's input and output, as both forms keep them).
  auto backward_peak = [&](bool keeping) {
    hidden.mutable_grad() = torch::Tensor();
    torch::Tensor output;
    {
      tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
      output = keeping ? tune::nn::gelu_linear_keeping(hidden, layer->weight, layer->bias)
                       : torch::linear(tune::nn::gelu_tanh_differentiable(hidden), layer->weight, layer->bias);
    }
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    tune::memory_tracker::reset_cpu_peak();
    output.sum().backward();
    return tune::memory_tracker::cpu_peak_bytes() - before;
  };
  const int64_t plain = backward_peak(false);
  const int64_t keeping = backward_peak(true);
  INFO("backward peak beyond its start: plain " << plain << " bytes, keeping " << keeping << " bytes");
  // Plain makes the output's gradient while GELU's output is held, then GELU's input gradient beside it; keeping
  // drops the output first and GELU's backward writes over that gradient: one [rows, inner] tensor less. (Both may
  // pass through the weight gradient's product, whose kernel can copy its transposed operand.)
  tune::clear_measured_cpu_kernels();
  CHECK(plain - keeping >= activation_bytes * 3 / 4);
}

TEST_CASE("run_gelu_linear recomputes GELU wherever autograd would keep it until backward and the weight trains",
          "[nn][gelu_linear]") {
  struct Selective : tune::nn::PlainBlockRunner {
    bool recomputes(tune::nn::RegionKind kind) const override { return kind != tune::nn::RegionKind::attention_core; }
  };
  Layer layer = make_layer(torch::kFloat);
  Selective selective;
  tune::nn::PlainBlockRunner plain;
  auto node = [&](tune::nn::BlockRunner* runner) {
    const auto output = tune::nn::run_gelu_linear(runner, layer.linear, layer.hidden);
    CHECK(torch::allclose(output, plain_form(layer, layer.hidden), 0.0, 1e-6));
    return output.grad_fn() ? output.grad_fn()->name() : std::string("none");
  };
  CHECK(node(nullptr).find("RecomputingGeluLinear") != std::string::npos);
  CHECK(node(&plain).find("RecomputingGeluLinear") != std::string::npos);
  CHECK(node(&selective).find("RecomputingGeluLinear") != std::string::npos);
  {
    // A checkpointed block's recompute: its graph lives through its own backward only, so GELU's output is kept
    // (no GELU in backward) and dropped early in backward; selective's blocks, which no block recompute wraps,
    // recompute still.
    const tune::nn::RecomputeScope in_recompute;
    CHECK(node(&plain).find("KeepingGeluLinear") != std::string::npos);
    CHECK(node(&selective).find("RecomputingGeluLinear") != std::string::npos);
    // A multi-block segment's recompute (policy sqrt) before its last block: its graph outlives its own backward.
    const tune::nn::SegmentBlockScope outliving;
    CHECK(node(&plain).find("RecomputingGeluLinear") != std::string::npos);
  }
  // A frozen weight (infer --grad, a LoRA base): its gradient needs no activation, so the plain form.
  layer.linear->weight.requires_grad_(false);
  layer.linear->bias.requires_grad_(false);
  CHECK(node(&plain).find("RecomputingGeluLinear") == std::string::npos);
  CHECK(node(&plain).find("KeepingGeluLinear") == std::string::npos);
  CHECK(node(&plain) != "none");
  {
    const tune::nn::RecomputeScope in_recompute;
    CHECK(node(&plain).find("GeluLinear") == std::string::npos);
  }
  torch::NoGradGuard no_grad;
  CHECK(node(&plain) == "none");
  CHECK(tune::nn::gelu_linear_recomputes(true, true));
  CHECK_FALSE(tune::nn::gelu_linear_recomputes(false, true));
  CHECK_FALSE(tune::nn::gelu_linear_recomputes(true, false));
  CHECK(tune::nn::gelu_linear_keeps(true, false, true));
  CHECK_FALSE(tune::nn::gelu_linear_keeps(false, false, true));
  CHECK_FALSE(tune::nn::gelu_linear_keeps(true, true, true));
  CHECK_FALSE(tune::nn::gelu_linear_keeps(true, false, false));
}
