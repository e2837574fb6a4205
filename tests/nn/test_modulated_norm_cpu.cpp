// nn/modulated_norm_cpu.h: the modulated norms' CPU kernels, forward and backward, against float64 autograd of the
// maths they replace (LayerNorm without affine, * (1 + scale) + shift; the gated form's x + gate * branch before it),
// through the autograd nodes of nn/adaln.h that call them. Inputs are chosen so that the roundings the kernels keep
// from the bf16 form (1 + scale in bf16, the product gate * branch in bf16) are exact: the float64 maths is then the
// same function, and the kernels must match it to fp32 rounding (bf16 outputs to one bf16 rounding). Widths that are
// not a multiple of the vector lanes, token counts over a block of rows, and one row group on two threads (token
// ranges with partial sums).
#include <ATen/Parallel.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "tune/nn/adaln.h"
#include "tune/nn/modulated_norm_cpu.h"

namespace {

constexpr double kEps = 1e-6;

torch::Tensor float64_of(const torch::Tensor& t) { return t.detach().to(torch::kFloat64); }

// k / 64 for integers k in [-32, 32]: 1 + scale is exact in bf16.
torch::Tensor exact_scale(int64_t groups, int64_t width) {
  return (torch::randint(-32, 33, {groups, width}) / 64.0).to(torch::kBFloat16);
}

// Powers of two times small integers: gate * branch is exact in bf16.
torch::Tensor exact_gate(int64_t groups, int64_t width) {
  return (torch::randint(-2, 3, {groups, width}).pow(2) * torch::randint(0, 2, {groups, width}).mul(2).sub(1) / 4.0)
      .to(torch::kBFloat16);
}

torch::Tensor exact_branch(int64_t groups, int64_t tokens, int64_t width) {
  return (torch::randint(-127, 128, {groups, tokens, width}) / 16.0).to(torch::kBFloat16);
}

// An absolute tolerance for a gradient: `relative` times its float64 reference's largest magnitude.
void check_close(const torch::Tensor& got, const torch::Tensor& want, double relative, const char* what) {
  const double magnitude = want.abs().max().item<double>();
  const double error = (float64_of(got) - want).abs().max().item<double>();
  INFO(what << ": largest error " << error << " against largest magnitude " << magnitude);
  CHECK(error <= relative * magnitude);
}

struct Sizes {
  int64_t groups, tokens, width;
};

void check_plain(const Sizes& size, torch::ScalarType grad_dtype) {
  const auto x = (torch::randn({size.groups, size.tokens, size.width}) * 2 + 0.5).requires_grad_(true);
  const auto shift = torch::randn({size.groups, size.width}).to(torch::kBFloat16).requires_grad_(true);
  const auto scale = exact_scale(size.groups, size.width).requires_grad_(true);
  const auto grad = torch::randn({size.groups, size.tokens, size.width}).to(grad_dtype);
  const auto [unused, mean, rstd] = at::native_layer_norm(x.detach(), {size.width}, {}, {}, kEps);
  REQUIRE(tune::nn::modulated_norm_backward_fits(grad, x.detach(), mean, rstd, scale.detach()));
  const std::optional<torch::ScalarType> out_dtype =
      grad_dtype == torch::kBFloat16 ? std::optional(torch::kBFloat16) : std::nullopt;
  const auto output = tune::nn::modulated_layer_norm(x, shift, scale, kEps, out_dtype);
  REQUIRE(tune::nn::modulated_norm_forward_fits(x.detach(), shift.detach(), scale.detach(), grad_dtype));
  output.backward(grad);

  const auto x64 = float64_of(x).requires_grad_(true), shift64 = float64_of(shift).requires_grad_(true);
  const auto scale64 = float64_of(scale).requires_grad_(true);
  const auto normalised = torch::layer_norm(x64, {size.width}, {}, {}, kEps);
  const auto output64 = normalised * (1 + scale64.unsqueeze(1)) + shift64.unsqueeze(1);
  output64.backward(float64_of(grad));
  CHECK(output.scalar_type() == grad_dtype);
  check_close(output, output64, grad_dtype == torch::kBFloat16 ? 4e-3 : 1e-6, "output");
  check_close(x.grad(), x64.grad(), 1e-5, "x");
  check_close(shift.grad(), shift64.grad(), 1e-2, "shift (bf16)");
  check_close(scale.grad(), scale64.grad(), 1e-2, "scale (bf16)");
}

void check_gated(const Sizes& size, bool residual_gradient) {
  const int64_t g = size.groups, t = size.tokens, d = size.width;
  const auto x = torch::randn({g, t, d}).requires_grad_(true);
  const auto gate = exact_gate(g, d).requires_grad_(true);
  const auto branch = exact_branch(g, t, d).requires_grad_(true);
  const auto shift = torch::randn({g, d}).to(torch::kBFloat16).requires_grad_(true);
  const auto scale = exact_scale(g, d).requires_grad_(true);
  const auto grad_normed = torch::randn({g, t, d}).to(torch::kBFloat16);
  const auto grad_sum = residual_gradient ? torch::randn({g, t, d}) : torch::Tensor();
  const auto outputs = tune::nn::gated_residual_modulated_layer_norm(x, gate, branch, shift, scale, kEps,
                                                                     torch::kBFloat16);
  if (residual_gradient) torch::autograd::backward({outputs.sum, outputs.normed}, {grad_sum, grad_normed});
  else outputs.normed.backward(grad_normed);

  // float64, with one rounding of the bf16 form kept: the residual gradient rounded to bf16 before the products with
  // the gate and the branch (the kernel's values by construction; the float64 sum's rounding may differ from the
  // kernel's fp32 one by an ulp, hence the tolerance).
  std::vector<torch::Tensor> leaves = {float64_of(x), float64_of(gate), float64_of(branch), float64_of(shift),
                                       float64_of(scale)};
  for (auto& leaf : leaves) leaf.requires_grad_(true);
  const auto sum64 = leaves[0] + leaves[1].unsqueeze(1) * leaves[2];
  const auto normed64 = torch::layer_norm(sum64, {d}, {}, {}, kEps) * (1 + leaves[4].unsqueeze(1)) +
                        leaves[3].unsqueeze(1);
  const auto grad_sum64 = torch::autograd::grad({normed64}, {sum64}, {float64_of(grad_normed)}, true)[0] +
                          (residual_gradient ? float64_of(grad_sum) : torch::zeros_like(sum64));
  const auto shift_scale = torch::autograd::grad({normed64}, {leaves[3], leaves[4]}, {float64_of(grad_normed)});
  const auto product_grad = grad_sum64.to(torch::kBFloat16).to(torch::kFloat64);
  check_close(outputs.sum, sum64, 1e-7, "sum");
  check_close(outputs.normed, normed64, 4e-3, "normed (bf16)");
  check_close(x.grad(), grad_sum64, 1e-5, "x");
  check_close(branch.grad(), product_grad * leaves[1].detach().unsqueeze(1), 1e-2, "branch (bf16)");
  check_close(gate.grad(), (product_grad * leaves[2].detach()).sum(1), 1e-2, "gate (bf16)");
  check_close(shift.grad(), shift_scale[0], 1e-2, "shift (bf16)");
  check_close(scale.grad(), shift_scale[1], 1e-2, "scale (bf16)");
}

// Runs `check` at one thread and at two, restoring the thread count.
template <typename Check>
void at_one_and_two_threads(const Check& check) {
  const int previous = at::get_num_threads();
  for (const int threads : {1, 2}) {
    INFO(threads << " thread(s)");
    at::set_num_threads(threads);
    check();
  }
  at::set_num_threads(previous);
}

}  // namespace

TEST_CASE("the fused modulated norm backward matches float64 autograd of LayerNorm, scale and shift",
          "[nn][adaln][modulated_norm_cpu]") {
  torch::manual_seed(11);
  at_one_and_two_threads([] {
    for (const auto grad_dtype : {torch::kBFloat16, torch::kFloat}) {
      INFO("incoming gradient " << c10::toString(grad_dtype));
      check_plain({3, 150, 40}, grad_dtype);  // 150 tokens: two full blocks of rows and a partial one
      check_plain({1, 70, 24}, grad_dtype);   // one group: split into token ranges on two threads
      check_plain({37, 3, 16}, grad_dtype);   // many short groups (Latte's temporal blocks)
    }
  });
}

TEST_CASE("the fused gated residual norm backward matches float64 autograd of x + gate * branch and the norm",
          "[nn][adaln][modulated_norm_cpu]") {
  torch::manual_seed(12);
  at_one_and_two_threads([] {
    for (const bool residual_gradient : {true, false}) {
      INFO("residual path's gradient " << residual_gradient);
      check_gated({3, 150, 40}, residual_gradient);
      check_gated({1, 70, 24}, residual_gradient);
    }
  });
}

TEST_CASE("the fused norm backward leaves other tensors to the autograd form", "[nn][adaln][modulated_norm_cpu]") {
  const auto x = torch::randn({2, 5, 8});
  const auto [unused, mean, rstd] = at::native_layer_norm(x, {8}, {}, {}, kEps);
  const auto scale = torch::randn({2, 8}), grad = torch::randn({2, 5, 8});
  CHECK(tune::nn::modulated_norm_backward_fits(grad, x, mean, rstd, scale));
  CHECK_FALSE(tune::nn::modulated_norm_backward_fits(grad, x.to(torch::kFloat64), mean, rstd, scale));
  CHECK_FALSE(tune::nn::modulated_norm_backward_fits(grad.transpose(0, 1).contiguous().transpose(0, 1), x, mean, rstd,
                                                     scale));
  CHECK_FALSE(tune::nn::modulated_norm_backward_fits(grad, x, mean, rstd, scale.t().contiguous().t()));
  const tune::nn::GatedResidualInputs fp32_gate{torch::randn({2, 8}), torch::randn({2, 5, 8}), torch::Tensor()};
  CHECK_FALSE(tune::nn::modulated_norm_backward_fits(grad, x, mean, rstd, scale, &fp32_gate));
  const tune::nn::GatedResidualInputs bf16_gate{fp32_gate.gate.to(torch::kBFloat16),
                                                fp32_gate.branch.to(torch::kBFloat16), torch::Tensor()};
  CHECK(tune::nn::modulated_norm_backward_fits(grad, x, mean, rstd, scale, &bf16_gate));
}

TEST_CASE("gated_residual: x + gate * branch in one pass each way, against float64", "[nn][adaln][modulated_norm_cpu]") {
  torch::manual_seed(13);
  at_one_and_two_threads([] {
    for (const Sizes& size : {Sizes{3, 150, 40}, Sizes{1, 70, 24}}) {
      const int64_t g = size.groups, t = size.tokens, d = size.width;
      const auto x = torch::randn({g, t, d}).requires_grad_(true);
      const auto gate = exact_gate(g, d).requires_grad_(true);
      const auto branch = exact_branch(g, t, d).requires_grad_(true);
      REQUIRE(tune::nn::gated_residual_fits(x.detach(), gate.detach(), branch.detach()));
      const auto sum = tune::nn::gated_residual(x, gate, branch);
      const auto grad = torch::randn({g, t, d});
      sum.backward(grad);
      // The product gate * branch is exact in bf16 here; the gradient into it is rounded to bf16, as the two-op
      // form's bf16 multiply receives it.
      const auto gate64 = float64_of(gate), branch64 = float64_of(branch);
      check_close(sum, float64_of(x) + gate64.unsqueeze(1) * branch64, 1e-7, "sum");
      CHECK(torch::equal(x.grad(), grad));
      const auto product_grad = float64_of(grad.to(torch::kBFloat16));
      CHECK(branch.grad().scalar_type() == torch::kBFloat16);
      check_close(branch.grad(), product_grad * gate64.unsqueeze(1), 4e-3, "branch (bf16)");
      check_close(gate.grad(), (product_grad * branch64).sum(1), 1e-2, "gate (bf16)");
    }
  });
  // Other dtypes: the two ops themselves.
  const auto x = torch::randn({2, 3, 4}, torch::kFloat64), gate = torch::randn({2, 4}, torch::kFloat64);
  const auto branch = torch::randn({2, 3, 4}, torch::kFloat64);
  CHECK_FALSE(tune::nn::gated_residual_fits(x, gate, branch));
  CHECK(torch::equal(tune::nn::gated_residual(x, gate, branch), x + gate.unsqueeze(1) * branch));
}
