// nn/adaln.h: modulated_layer_norm against the two-op form it replaces (modulate(layer_norm_fp32(x))), whose
// gradients autograd derives from LayerNorm's and the multiply's own formulas: float64 (an independent derivation of
// the same maths), and the dtypes Latte runs it in (fp32 x, bf16 shift and scale under autocast); and what it keeps.
// gated_residual_modulated_layer_norm likewise against the residual sum followed by modulated_layer_norm.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "tune/core/memory_tracker.h"
#include "tune/nn/adaln.h"

namespace {

struct Gradients {
  torch::Tensor output, x, shift, scale;
};

Gradients run(bool fused, const torch::Tensor& x0, const torch::Tensor& shift0, const torch::Tensor& scale0,
              const torch::Tensor& grad_output) {
  auto x = x0.clone().requires_grad_(true);
  auto shift = shift0.clone().requires_grad_(true);
  auto scale = scale0.clone().requires_grad_(true);
  const torch::Tensor output = fused ? tune::nn::modulated_layer_norm(x, shift, scale, 1e-6)
                                     : tune::nn::modulate(tune::nn::layer_norm_fp32(x, 1e-6), shift, scale);
  output.backward(grad_output);
  return {output.detach(), x.grad(), shift.grad(), scale.grad()};
}

}  // namespace

TEST_CASE("modulated_layer_norm equals modulate(layer_norm) in value and in every gradient", "[nn][adaln]") {
  torch::manual_seed(0);
  SECTION("float64") {
    const auto options = torch::TensorOptions().dtype(torch::kFloat64);
    const auto x = torch::randn({3, 7, 16}, options) * 3 + 1, shift = torch::randn({3, 16}, options);
    const auto scale = torch::randn({3, 16}, options), grad = torch::randn({3, 7, 16}, options);
    const Gradients fused = run(true, x, shift, scale, grad), plain = run(false, x, shift, scale, grad);
    CHECK(torch::equal(fused.output, plain.output));
    CHECK(torch::allclose(fused.x, plain.x, 1e-12, 1e-12));
    CHECK(torch::allclose(fused.shift, plain.shift, 1e-12, 1e-12));
    CHECK(torch::allclose(fused.scale, plain.scale, 1e-12, 1e-12));
  }
  SECTION("fp32 x with bf16 shift and scale, a non-contiguous x (Latte's view of its state)") {
    const auto state = torch::randn({4, 9, 32});
    const auto x = state.narrow(1, 0, 8);
    const auto shift = torch::randn({4, 32}).to(torch::kBFloat16), scale = torch::randn({4, 32}).to(torch::kBFloat16);
    const auto grad = torch::randn({4, 8, 32});
    const Gradients fused = run(true, x, shift, scale, grad), plain = run(false, x, shift, scale, grad);
    CHECK(fused.output.scalar_type() == torch::kFloat);
    // Within fp32 rounding: on the CPU the fused form is nn/modulated_norm_cpu's kernel, whose row statistics are
    // summed in another order than ATen's LayerNorm.
    CHECK(torch::allclose(fused.output, plain.output, 1e-5, 1e-5));
    CHECK(fused.shift.scalar_type() == torch::kBFloat16);
    CHECK(fused.scale.scalar_type() == torch::kBFloat16);
    CHECK(torch::allclose(fused.x, plain.x, 1e-5, 1e-5));
    CHECK(torch::allclose(fused.shift.to(torch::kFloat), plain.shift.to(torch::kFloat), 1e-2, 1e-2));
    CHECK(torch::allclose(fused.scale.to(torch::kFloat), plain.scale.to(torch::kFloat), 1e-2, 1e-2));
  }
  SECTION("only the inputs that need a gradient get one") {
    const auto x = torch::randn({2, 5, 8}).requires_grad_(true);
    const auto shift = torch::randn({2, 8}), scale = torch::randn({2, 8});
    tune::nn::modulated_layer_norm(x, shift, scale).sum().backward();
    CHECK(x.grad().defined());
    CHECK_FALSE(shift.grad().defined());
  }
}

TEST_CASE("modulated norms written in bf16: the fp32 output's cast, and its gradients bit for bit", "[nn][adaln]") {
  // Latte under autocast: fp32 x, bf16 shift, scale (and gate, branch); the output feeds a bf16 product, whose input
  // gradient comes back in bf16 (the two-op form gets its fp32 cast).
  torch::manual_seed(5);
  const auto bf16 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const auto x0 = torch::randn({4, 9, 32}) * 2 + 1;
  const auto shift0 = bf16(torch::randn({4, 32})), scale0 = bf16(torch::randn({4, 32}));
  const auto gate0 = bf16(torch::randn({4, 32})), branch0 = bf16(torch::randn({4, 9, 32}));
  const auto upstream = bf16(torch::randn({4, 9, 32}));
  auto leaves = [](std::vector<torch::Tensor> tensors) {
    for (auto& t : tensors) t = t.clone().requires_grad_(true);
    return tensors;
  };
  SECTION("modulated_layer_norm") {
    const auto a = leaves({x0, shift0, scale0}), b = leaves({x0, shift0, scale0});
    const auto narrow = tune::nn::modulated_layer_norm(a[0], a[1], a[2], 1e-6, torch::kBFloat16);
    const auto wide = tune::nn::modulated_layer_norm(b[0], b[1], b[2], 1e-6);
    REQUIRE(narrow.scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(narrow, wide.to(torch::kBFloat16)));
    narrow.backward(upstream);
    wide.backward(upstream.to(torch::kFloat));
    for (size_t i = 0; i < 3; ++i) {
      INFO("input " << i);
      CHECK(torch::equal(a[i].grad(), b[i].grad()));
    }
  }
  SECTION("gated_residual_modulated_layer_norm") {
    const auto a = leaves({x0, gate0, branch0, shift0, scale0}), b = leaves({x0, gate0, branch0, shift0, scale0});
    const auto narrow = tune::nn::gated_residual_modulated_layer_norm(a[0], a[1], a[2], a[3], a[4], 1e-6,
                                                                      torch::kBFloat16);
    const auto wide = tune::nn::gated_residual_modulated_layer_norm(b[0], b[1], b[2], b[3], b[4], 1e-6);
    REQUIRE(narrow.normed.scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(narrow.sum, wide.sum));
    CHECK(torch::equal(narrow.normed, wide.normed.to(torch::kBFloat16)));
    const auto grad_sum = torch::randn({4, 9, 32});
    torch::autograd::backward({narrow.sum, narrow.normed}, {grad_sum, upstream});
    torch::autograd::backward({wide.sum, wide.normed}, {grad_sum, upstream.to(torch::kFloat)});
    for (size_t i = 0; i < 5; ++i) {
      INFO("input " << i);
      CHECK(torch::equal(a[i].grad(), b[i].grad()));
    }
  }
}

TEST_CASE("modulated_layer_norm keeps no normalised copy for backward", "[nn][adaln]") {
  tune::memory_tracker::install();
  const auto x = torch::randn({8, 256, 64}, torch::requires_grad());  // 512 KiB in fp32
  const auto shift = torch::randn({8, 64}, torch::requires_grad()), scale = torch::randn({8, 64}, torch::requires_grad());
  auto kept_after_forward = [&](bool fused) {
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    const torch::Tensor output = fused ? tune::nn::modulated_layer_norm(x, shift, scale)
                                       : tune::nn::modulate(tune::nn::layer_norm_fp32(x), shift, scale);
    return tune::memory_tracker::cpu_live_bytes() - before - output.numel() * 4;  // beyond the output itself
  };
  const int64_t fused = kept_after_forward(true), plain = kept_after_forward(false);
  const int64_t normalised = x.numel() * 4;
  INFO("kept beyond the output: fused " << fused << " bytes, two-op form " << plain);
  CHECK(plain >= normalised);        // the multiply keeps the fp32 normalised x
  CHECK(fused < normalised / 16);    // statistics per row only
}

namespace {

struct ResidualGradients {
  torch::Tensor sum, normed, x, gate, branch, shift, scale;
};

// The two-op form a DiT block writes, `y = x + gate.unsqueeze(1) * branch` then modulated_layer_norm(y), or the
// fused node; backward from given gradients of both outputs (the residual path and the norm's).
ResidualGradients run_residual(bool fused, const std::vector<torch::Tensor>& inputs, const torch::Tensor& grad_sum,
                               const torch::Tensor& grad_normed) {
  std::vector<torch::Tensor> leaves;
  for (const auto& input : inputs) leaves.push_back(input.clone().requires_grad_(true));
  const auto &x = leaves[0], &gate = leaves[1], &branch = leaves[2], &shift = leaves[3], &scale = leaves[4];
  torch::Tensor sum, normed;
  if (fused) {
    const auto outputs = tune::nn::gated_residual_modulated_layer_norm(x, gate, branch, shift, scale, 1e-6);
    sum = outputs.sum;
    normed = outputs.normed;
  } else {
    sum = x + gate.unsqueeze(1) * branch;
    normed = tune::nn::modulated_layer_norm(sum, shift, scale, 1e-6);
  }
  torch::autograd::backward({sum, normed}, {grad_sum, grad_normed});
  return {sum.detach(), normed.detach(), x.grad(), gate.grad(), branch.grad(), shift.grad(), scale.grad()};
}

}  // namespace

TEST_CASE("gated_residual_modulated_layer_norm equals the residual sum then the modulated norm", "[nn][adaln]") {
  torch::manual_seed(1);
  SECTION("float64: values equal, gradients to rounding") {
    const auto options = torch::TensorOptions().dtype(torch::kFloat64);
    const std::vector<torch::Tensor> inputs = {torch::randn({3, 7, 16}, options) * 2 + 1, torch::randn({3, 16}, options),
                                               torch::randn({3, 7, 16}, options), torch::randn({3, 16}, options),
                                               torch::randn({3, 16}, options)};
    const auto grad_sum = torch::randn({3, 7, 16}, options), grad_normed = torch::randn({3, 7, 16}, options);
    const auto fused = run_residual(true, inputs, grad_sum, grad_normed);
    const auto plain = run_residual(false, inputs, grad_sum, grad_normed);
    CHECK(torch::equal(fused.sum, plain.sum));
    CHECK(torch::equal(fused.normed, plain.normed));
    for (const auto& [a, b] : {std::pair{fused.x, plain.x}, {fused.gate, plain.gate}, {fused.branch, plain.branch},
                               {fused.shift, plain.shift}, {fused.scale, plain.scale}}) {
      CHECK(torch::allclose(a, b, 1e-12, 1e-12));
    }
  }
  SECTION("autocast's dtypes (fp32 x, bf16 gate, branch, shift and scale): every output and gradient bit for bit") {
    const auto bf16 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
    const std::vector<torch::Tensor> inputs = {torch::randn({4, 9, 32}), bf16(torch::randn({4, 32})),
                                               bf16(torch::randn({4, 9, 32})), bf16(torch::randn({4, 32})),
                                               bf16(torch::randn({4, 32}))};
    const auto grad_sum = torch::randn({4, 9, 32}), grad_normed = torch::randn({4, 9, 32});
    const auto fused = run_residual(true, inputs, grad_sum, grad_normed);
    const auto plain = run_residual(false, inputs, grad_sum, grad_normed);
    CHECK(fused.sum.scalar_type() == torch::kFloat);
    CHECK(torch::equal(fused.sum, plain.sum));
    CHECK(torch::equal(fused.normed, plain.normed));
    CHECK(fused.gate.scalar_type() == torch::kBFloat16);
    CHECK(fused.branch.scalar_type() == torch::kBFloat16);
    for (const auto& [a, b] : {std::pair{fused.x, plain.x}, {fused.gate, plain.gate}, {fused.branch, plain.branch},
                               {fused.shift, plain.shift}, {fused.scale, plain.scale}}) {
      CHECK(torch::equal(a, b));
    }
  }
  SECTION("a gradient for one output only: the residual path alone, or the norm alone") {
    const std::vector<torch::Tensor> inputs = {torch::randn({2, 5, 8}), torch::randn({2, 8}), torch::randn({2, 5, 8}),
                                               torch::randn({2, 8}), torch::randn({2, 8})};
    for (const bool residual_only : {true, false}) {
      auto leaves = inputs;
      for (auto& leaf : leaves) leaf = leaf.clone().requires_grad_(true);
      auto plain_leaves = inputs;
      for (auto& leaf : plain_leaves) leaf = leaf.clone().requires_grad_(true);
      const auto fused = tune::nn::gated_residual_modulated_layer_norm(leaves[0], leaves[1], leaves[2], leaves[3],
                                                                       leaves[4]);
      const auto plain_sum = plain_leaves[0] + plain_leaves[1].unsqueeze(1) * plain_leaves[2];
      const auto plain_normed = tune::nn::modulated_layer_norm(plain_sum, plain_leaves[3], plain_leaves[4]);
      (residual_only ? fused.sum : fused.normed).pow(2).sum().backward();
      (residual_only ? plain_sum : plain_normed).pow(2).sum().backward();
      CHECK(torch::allclose(leaves[0].grad(), plain_leaves[0].grad(), 1e-5, 1e-5));
      CHECK(torch::allclose(leaves[1].grad(), plain_leaves[1].grad(), 1e-5, 1e-5));
      CHECK(torch::allclose(leaves[2].grad(), plain_leaves[2].grad(), 1e-5, 1e-5));
      if (residual_only) CHECK_FALSE(leaves[3].grad().defined());
      else CHECK(torch::allclose(leaves[4].grad(), plain_leaves[4].grad(), 1e-5, 1e-5));
    }
  }
}

TEST_CASE("gated_residual_modulated_layer_norm keeps no copy of the residual sum for backward", "[nn][adaln]") {
  tune::memory_tracker::install();
  // x and the branch are leaves here (in a block the first norm keeps x and the gate's gradient the branch anyway).
  const auto x = torch::randn({8, 256, 64}, torch::requires_grad());  // 512 KiB in fp32
  const auto branch = torch::randn({8, 256, 64}, torch::requires_grad());
  const auto gate = torch::randn({8, 64}, torch::requires_grad());
  const auto shift = torch::randn({8, 64}, torch::requires_grad()), scale = torch::randn({8, 64}, torch::requires_grad());
  auto kept_after_forward = [&](bool fused) {
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    torch::Tensor sum, normed;
    if (fused) {
      const auto outputs = tune::nn::gated_residual_modulated_layer_norm(x, gate, branch, shift, scale);
      sum = outputs.sum;
      normed = outputs.normed;
    } else {
      sum = x + gate.unsqueeze(1) * branch;
      normed = tune::nn::modulated_layer_norm(sum, shift, scale);
    }
    // The block's next residual add keeps nothing of the sum: once it is used, only backward's references remain.
    sum = torch::Tensor();
    return tune::memory_tracker::cpu_live_bytes() - before - normed.numel() * 4;  // beyond the norm's output
  };
  const int64_t fused = kept_after_forward(true), plain = kept_after_forward(false);
  const int64_t residual_sum = x.numel() * 4;
  INFO("kept beyond the output: fused " << fused << " bytes, two-op form " << plain);
  CHECK(plain >= residual_sum);      // the second norm keeps the fp32 sum
  CHECK(fused < residual_sum / 16);  // statistics per row only
}
