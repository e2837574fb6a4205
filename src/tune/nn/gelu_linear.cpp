// layer(gelu(x)) with GELU recomputed in backward, or kept and dropped early in backward.
#include "tune/nn/gelu_linear.h"

#include <torch/autograd.h>

#include "tune/nn/block_runner.h"
#include "tune/nn/gelu_tanh.h"
#include "tune/nn/linear.h"

namespace tune::nn {
namespace {

// Both custom forms, one node type each (autograd names them): `Keep` (the keeping form) holds GELU's output in the
// context's saved_data, so that backward can drop it before the input's gradient is made (save_for_backward's
// tensors live until backward returns); otherwise (the recomputing form) backward rebuilds it for the weight's
// gradient alone.
template <typename Self, bool Keep>
struct GeluLinearForm : public torch::autograd::Function<Self> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    // Under autocast the operands cast as autocast casts them in the plain form, but not through its cache, which
    // would keep the weight's copy until the scope ends (nn::linear_in_dtype); autograd is off here.
    const std::optional<torch::ScalarType> dtype = autocast_compute_dtype(hidden.device());
    torch::Tensor activation = gelu_tanh(hidden);
    if (dtype) activation = activation.to(*dtype);  // the product's operand, as the plain form's linear keeps it
    torch::Tensor output =
        dtype ? linear_in_dtype(activation, weight, bias, *dtype) : torch::linear(activation, weight, bias);
    ctx->save_for_backward({hidden, weight});
    if (Keep) ctx->saved_data["activation"] = std::move(activation);
    save_bias_kind(ctx, bias, weight);
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    // The output's gradient comes in the product's dtype (autograd casts it to the output's): the compute dtype.
    const torch::Tensor grad = grad_outputs[0].reshape({-1, grad_outputs[0].size(-1)});
    const auto dtype = grad.scalar_type();
    const torch::Tensor flat_hidden = hidden.reshape({-1, hidden.size(-1)});
    const auto kept = ctx->saved_data.find("activation");
    torch::Tensor grad_hidden, grad_weight, grad_bias;
    if (ctx->needs_input_grad(1)) {
      // GELU's output, kept or rebuilt, lives only for this product (in the plain form's order:
      // nn::linear_weight_gradient).
      const torch::Tensor activation = kept != ctx->saved_data.end()
                                           ? kept->second.toTensor().reshape({-1, hidden.size(-1)})
                                           : gelu_tanh(flat_hidden);
      grad_weight = linear_weight_gradient(activation.to(dtype), grad, weight);
    }
    if (kept != ctx->saved_data.end()) ctx->saved_data.erase(kept);  // freed before the input's gradient is made
    grad_bias = linear_bias_gradient(ctx, grad, 2);
    if (ctx->needs_input_grad(0)) {
      // A fresh tensor nothing else holds: GELU's backward writes over it.
      const torch::Tensor grad_activation = grad.mm(weight.to(dtype)).to(hidden.scalar_type());
      grad_hidden = gelu_tanh_backward_(grad_activation, flat_hidden).view(hidden.sizes());
    }
    return {grad_hidden, grad_weight, grad_bias};
  }
};

struct RecomputingGeluLinear : GeluLinearForm<RecomputingGeluLinear, false> {};
struct KeepingGeluLinear : GeluLinearForm<KeepingGeluLinear, true> {};

}  // namespace

torch::Tensor gelu_linear_keeping(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias) {
  return KeepingGeluLinear::apply(hidden, weight, bias);
}

torch::Tensor gelu_linear_recomputing(const torch::Tensor& hidden, const torch::Tensor& weight,
                                      const torch::Tensor& bias) {
  return RecomputingGeluLinear::apply(hidden, weight, bias);
}

torch::Tensor run_gelu_linear(BlockRunner* runner, const torch::Tensor& weight, const torch::Tensor& bias,
                              const torch::Tensor& hidden) {
  const bool selective = runner != nullptr && runner->recomputes(RegionKind::activation);
  const bool kept_until_backward = graph_kept_until_backward(selective);
  if (gelu_linear_recomputes(kept_until_backward, weight.requires_grad())) {
    return gelu_linear_recomputing(hidden, weight, bias);
  }
  if (gelu_linear_keeps(at::GradMode::is_enabled(), kept_until_backward, weight.requires_grad())) {
    return gelu_linear_keeping(hidden, weight, bias);
  }
  auto gelu = [](const std::vector<torch::Tensor>& inputs) { return gelu_tanh_differentiable(inputs[0]); };
  // ATen's linear, as nn::linear (linear.h says why not the C++ frontend's).
  return torch::linear(run_region(runner, RegionKind::activation, gelu, {hidden}), weight, bias);
}

}  // namespace tune::nn
