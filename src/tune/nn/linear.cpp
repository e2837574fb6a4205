// ATen's linear, with the weight cast again in backward under autocast (linear.h).
#include "tune/nn/linear.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <optional>

#include "tune/compat/torch_compat.h"
#include "tune/nn/block_runner.h"

namespace tune::nn {
namespace {

struct WeightRecastingLinear : public torch::autograd::Function<WeightRecastingLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias, int64_t compute_dtype) {
    const auto dtype = static_cast<torch::ScalarType>(compute_dtype);
    // The input cast here, so that the copy kept is this one; the weight's copy is freed with the product.
    const torch::Tensor input_copy = input.to(dtype);
    torch::Tensor output = linear_in_dtype(input_copy, weight, bias, dtype);
    ctx->save_for_backward({weight.requires_grad() ? input_copy : torch::Tensor(), weight});
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
    save_bias_kind(ctx, bias, weight);
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input_copy = saved[0];
    const torch::Tensor& weight = saved[1];
    // In the product's dtype (autograd casts the gradient to the output's): the compute dtype.
    const torch::Tensor& grad_output = grad_outputs[0];
    const torch::Tensor grad = grad_output.reshape({-1, grad_output.size(-1)});
    const auto dtype = grad.scalar_type();
    torch::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(1)) {
      grad_weight = linear_weight_gradient(input_copy.reshape({-1, input_copy.size(-1)}), grad, weight);
    }
    grad_bias = linear_bias_gradient(ctx, grad, 2);
    if (ctx->needs_input_grad(0)) {
      auto sizes = grad_output.sizes().vec();
      sizes.back() = weight.size(1);
      grad_input = grad.mm(weight.to(dtype))
                       .view(sizes)
                       .to(static_cast<torch::ScalarType>(ctx->saved_data["input_dtype"].toInt()));
    }
    return {grad_input, grad_weight, grad_bias, torch::Tensor()};
  }
};

}  // namespace

std::optional<torch::ScalarType> autocast_compute_dtype(const torch::Device& device) {
  if (device.is_cpu() && compat::autocast_cpu_enabled()) return compat::autocast_cpu_dtype();
  if (device.is_cuda() && compat::autocast_cuda_enabled()) return compat::autocast_cuda_dtype();
  return std::nullopt;
}

torch::Tensor linear_in_dtype(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                              torch::ScalarType dtype) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return torch::linear(input.to(dtype), weight.to(dtype), bias.defined() ? bias.to(dtype) : bias);
}

torch::Tensor linear_weight_gradient(const torch::Tensor& flat_input, const torch::Tensor& grad,
                                     const torch::Tensor& weight) {
  return flat_input.t().mm(grad).t().to(weight.options(), /*non_blocking=*/false, /*copy=*/false,
                                        torch::MemoryFormat::Contiguous);
}

void save_bias_kind(torch::autograd::AutogradContext* ctx, const torch::Tensor& bias, const torch::Tensor& weight) {
  ctx->saved_data["has_bias"] = bias.defined();
  ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.defined() ? bias.scalar_type() : weight.scalar_type());
}

torch::Tensor linear_bias_gradient(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad,
                                   size_t bias_input) {
  if (!ctx->saved_data["has_bias"].toBool() || !ctx->needs_input_grad(bias_input)) return {};
  return grad.sum(0).to(static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
}

torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (torch::GradMode::is_enabled() && weight.requires_grad() && weight.is_floating_point()) {
    const std::optional<torch::ScalarType> dtype = autocast_compute_dtype(input.device());
    if (dtype && *dtype != weight.scalar_type() && input.is_floating_point() &&
        linear_recasts_weight(true, graph_kept_until_backward(/*selective=*/false), true)) {
      return WeightRecastingLinear::apply(input, weight, bias, static_cast<int64_t>(*dtype));
    }
  }
  return torch::linear(input, weight, bias);
}

}  // namespace tune::nn
