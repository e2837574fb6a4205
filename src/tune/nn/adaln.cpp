// adaLN helpers shared by DiT-style blocks (Latte).
#include "tune/nn/adaln.h"

#include <torch/autograd.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <tuple>

#include "tune/nn/block_runner.h"
#include "tune/nn/linear.h"
#include "tune/nn/modulated_norm_cpu.h"

namespace tune::nn {

torch::Tensor layer_norm_fp32(const torch::Tensor& input, double eps) {
  const auto compute_dtype = torch::promote_types(input.scalar_type(), torch::kFloat32);
  return torch::layer_norm(input.to(compute_dtype), {input.size(-1)}, /*weight=*/{}, /*bias=*/{}, eps);
}

torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

namespace {

// modulate()'s operations with the sum written straight into `out_dtype` (-1: modulate's own dtype): the same
// values as modulate(...).to(out_dtype), a rounding on store instead of an fp32 tensor and a cast pass.
torch::Tensor modulate_into(const torch::Tensor& normalised, const torch::Tensor& shift, const torch::Tensor& scale,
                            int64_t out_dtype) {
  if (out_dtype < 0) return modulate(normalised, shift, scale);
  const torch::Tensor scaled = normalised * (1 + scale.unsqueeze(1));
  torch::Tensor output = torch::empty(scaled.sizes(), scaled.options().dtype(static_cast<torch::ScalarType>(out_dtype)));
  return at::add_out(output, scaled, shift.unsqueeze(1));
}

// The sum over tokens (dim 1) of a gradient in fp32 or wider: a low-precision gradient (modulate_into's) is summed
// as its fp32 values, as the two-op form sums the fp32 gradient autograd's cast gives it.
torch::Tensor token_sum(const torch::Tensor& grad) {
  const auto wide = torch::promote_types(grad.scalar_type(), torch::kFloat32);
  return grad.scalar_type() == wide ? grad.sum(1) : grad.sum(1, /*keepdim=*/false, wide);
}

// Saves x, mean, rstd and scale; the normalised x, (x - mean) * rstd, is recomputed in backward (header comment).
struct ModulatedLayerNorm : public torch::autograd::Function<ModulatedLayerNorm> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& shift,
                               const torch::Tensor& scale, double eps, int64_t out_dtype) {
    ctx->saved_data["shift_dtype"] = static_cast<int64_t>(shift.scalar_type());
    const torch::ScalarType output_dtype = out_dtype < 0 ? torch::kFloat : static_cast<torch::ScalarType>(out_dtype);
    if (modulated_norm_forward_fits(x, shift, scale, output_dtype)) {
      ModulatedNormForward result = modulated_norm_forward_cpu(x, shift, scale, eps, output_dtype);
      ctx->save_for_backward({x, result.mean, result.rstd, scale});
      return result.output;
    }
    const auto compute_dtype = torch::promote_types(x.scalar_type(), torch::kFloat32);
    const torch::Tensor x_compute = x.to(compute_dtype);
    auto [normalised, mean, rstd] = at::native_layer_norm(x_compute, {x.size(-1)}, {}, {}, eps);
    // The same operations as modulate(), so forward's values are the two-op form's bit for bit.
    torch::Tensor output = modulate_into(normalised, shift, scale, out_dtype);
    ctx->save_for_backward({x, mean, rstd, scale});
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &mean = saved[1], &rstd = saved[2], &scale = saved[3];
    const torch::Tensor& grad_output = grad_outputs[0];
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are explicit here
    torch::NoGradGuard no_grad;
    const auto shift_dtype = static_cast<torch::ScalarType>(ctx->saved_data["shift_dtype"].toInt());
    if (modulated_norm_backward_fits(grad_output, x, mean, rstd, scale)) {
      ModulatedNormGradients grads = modulated_norm_backward_cpu(grad_output, x, mean, rstd, scale);
      return {ctx->needs_input_grad(0) ? grads.input : torch::Tensor(),
              ctx->needs_input_grad(1) ? grads.shift.to(shift_dtype) : torch::Tensor(),
              ctx->needs_input_grad(2) ? grads.scale.to(scale.scalar_type()) : torch::Tensor(), torch::Tensor(),
              torch::Tensor()};
    }
    const auto compute_dtype = torch::promote_types(x.scalar_type(), torch::kFloat32);
    const torch::Tensor x_compute = x.to(compute_dtype);
    torch::Tensor grad_x, grad_shift, grad_scale;
    if (ctx->needs_input_grad(1)) grad_shift = token_sum(grad_output).to(shift_dtype);
    if (ctx->needs_input_grad(2)) {
      const torch::Tensor normalised = (x_compute - mean) * rstd;
      grad_scale = (grad_output * normalised).sum(1).to(scale.scalar_type());
    }
    if (ctx->needs_input_grad(0)) {
      // (1 + scale) widened first: a low-precision gradient (out_dtype's) times it is then the fp32 product the
      // two-op form's fp32 gradient gives, not a low-precision one.
      const torch::Tensor grad_normalised = grad_output * (1 + scale.unsqueeze(1)).to(compute_dtype);
      grad_x = std::get<0>(at::native_layer_norm_backward(grad_normalised.to(compute_dtype), x_compute, {x.size(-1)},
                                                          mean, rstd, {}, {}, {true, false, false}))
                   .to(x.scalar_type());
    }
    return {grad_x, grad_shift, grad_scale, torch::Tensor(), torch::Tensor()};
  }
};

// y = x + gate * branch and modulated_layer_norm(y): saves x, gate, branch, the row statistics, scale; recomputes y
// and the normalised y in backward (header comment). The sum's dtypes are the two-op form's: the product in the
// dtype of gate and branch (bf16 under autocast), the sum promoted to x's (fp32).
struct GatedResidualModulatedLayerNorm : public torch::autograd::Function<GatedResidualModulatedLayerNorm> {
  static torch::Tensor residual_sum(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& branch) {
    return x + gate.unsqueeze(1) * branch;
  }

  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& gate, const torch::Tensor& branch,
                                                const torch::Tensor& shift, const torch::Tensor& scale, double eps,
                                                int64_t out_dtype) {
    ctx->set_materialize_grads(false);  // an output without a gradient skips its part of backward (handled there)
    ctx->saved_data["shift_dtype"] = static_cast<int64_t>(shift.scalar_type());
    const torch::ScalarType output_dtype = out_dtype < 0 ? torch::kFloat : static_cast<torch::ScalarType>(out_dtype);
    const GatedResidualInputs gated{gate, branch, torch::Tensor()};
    if (modulated_norm_forward_fits(x, shift, scale, output_dtype, &gated)) {
      ModulatedNormForward result = modulated_norm_forward_cpu(x, shift, scale, eps, output_dtype, &gated);
      ctx->save_for_backward({x, gate, branch, result.mean, result.rstd, scale});
      return {result.sum, result.output};
    }
    torch::Tensor sum = residual_sum(x, gate, branch);
    const auto compute_dtype = torch::promote_types(sum.scalar_type(), torch::kFloat32);
    auto [normalised, mean, rstd] = at::native_layer_norm(sum.to(compute_dtype), {sum.size(-1)}, {}, {}, eps);
    torch::Tensor normed = modulate_into(normalised, shift, scale, out_dtype);
    ctx->save_for_backward({x, gate, branch, mean, rstd, scale});
    return {sum, normed};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &gate = saved[1], &branch = saved[2];
    const torch::Tensor &mean = saved[3], &rstd = saved[4], &scale = saved[5];
    const torch::Tensor &grad_sum_outside = grad_outputs[0], &grad_normed = grad_outputs[1];
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are explicit here
    torch::NoGradGuard no_grad;
    const GatedResidualInputs gated{gate, branch, grad_sum_outside};
    if (grad_normed.defined() && modulated_norm_backward_fits(grad_normed, x, mean, rstd, scale, &gated)) {
      ModulatedNormGradients grads = modulated_norm_backward_cpu(grad_normed, x, mean, rstd, scale, &gated);
      const auto shift_dtype = static_cast<torch::ScalarType>(ctx->saved_data["shift_dtype"].toInt());
      const auto pick = [ctx](size_t input, const torch::Tensor& grad) {
        return ctx->needs_input_grad(input) ? grad : torch::Tensor();
      };
      return {pick(0, grads.input), pick(1, grads.gate.to(gate.scalar_type())), pick(2, grads.branch),
              pick(3, grads.shift.to(shift_dtype)), pick(4, grads.scale.to(scale.scalar_type())), torch::Tensor(),
              torch::Tensor()};
    }
    // Temporaries are scoped so that no more is alive at once than the two-op form's backward holds beside the sum
    // it kept: the recomputed sum, then one [N, T, D] gradient at a time.
    torch::Tensor grad_shift, grad_scale, grad_sum;
    if (grad_normed.defined()) {
      const torch::Tensor sum = residual_sum(x, gate, branch);
      const auto compute_dtype = torch::promote_types(sum.scalar_type(), torch::kFloat32);
      const torch::Tensor sum_compute = sum.to(compute_dtype);
      if (ctx->needs_input_grad(3)) {
        const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["shift_dtype"].toInt());
        grad_shift = token_sum(grad_normed).to(dtype);
      }
      if (ctx->needs_input_grad(4)) {
        grad_scale = (grad_normed * ((sum_compute - mean) * rstd)).sum(1).to(scale.scalar_type());
      }
      // (1 + scale) widened first, as in ModulatedLayerNorm's backward.
      grad_sum = std::get<0>(at::native_layer_norm_backward(grad_normed * (1 + scale.unsqueeze(1)).to(compute_dtype),
                                                            sum_compute, {sum.size(-1)}, mean, rstd, {}, {},
                                                            {true, false, false}))
                     .to(sum.scalar_type());
    }
    if (grad_sum_outside.defined()) {
      // In place: grad_sum is this backward's own fresh tensor (the residual path's gradient is not).
      if (grad_sum.defined()) grad_sum.add_(grad_sum_outside);
      else grad_sum = grad_sum_outside;
    }
    torch::Tensor grad_x, grad_gate, grad_branch;
    if (grad_sum.defined()) {
      if (ctx->needs_input_grad(0)) grad_x = grad_sum.to(x.scalar_type());
      // The product's gradient arrives in the product's dtype, as autograd casts it for the two-op form's add.
      const torch::Tensor grad_product = grad_sum.to(torch::promote_types(gate.scalar_type(), branch.scalar_type()));
      if (ctx->needs_input_grad(1)) grad_gate = (grad_product * branch).sum(1).to(gate.scalar_type());
      if (ctx->needs_input_grad(2)) grad_branch = (grad_product * gate.unsqueeze(1)).to(branch.scalar_type());
    }
    return {grad_x, grad_gate, grad_branch, grad_shift, grad_scale, torch::Tensor(), torch::Tensor()};
  }
};

// x + gate * branch through nn/modulated_norm_cpu's kernels (gated_residual_fits' tensors only).
struct GatedResidual : public torch::autograd::Function<GatedResidual> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& gate,
                               const torch::Tensor& branch) {
    ctx->save_for_backward({gate, branch});
    return gated_residual_forward_cpu(x, gate, branch);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &gate = saved[0], &branch = saved[1];
    const torch::Tensor& grad = grad_outputs[0];
    torch::Tensor grad_gate, grad_branch;
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      GatedResidualGradients grads = gated_residual_backward_cpu(grad, gate, branch);
      if (ctx->needs_input_grad(1)) grad_gate = grads.gate.to(gate.scalar_type());
      if (ctx->needs_input_grad(2)) grad_branch = std::move(grads.branch);
    }
    return {ctx->needs_input_grad(0) ? grad : torch::Tensor(), grad_gate, grad_branch};
  }
};

int64_t dtype_code(std::optional<torch::ScalarType> dtype) { return dtype ? static_cast<int64_t>(*dtype) : -1; }

}  // namespace

torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& branch) {
  if (gated_residual_fits(x, gate, branch)) return GatedResidual::apply(x, gate, branch);
  return x + gate.unsqueeze(1) * branch;
}

GatedResidualNorm gated_residual_modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& gate,
                                                      const torch::Tensor& branch, const torch::Tensor& shift,
                                                      const torch::Tensor& scale, double eps,
                                                      std::optional<torch::ScalarType> out_dtype) {
  const auto outputs =
      GatedResidualModulatedLayerNorm::apply(x, gate, branch, shift, scale, eps, dtype_code(out_dtype));
  return {outputs[0], outputs[1]};
}

torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                   double eps, std::optional<torch::ScalarType> out_dtype) {
  return ModulatedLayerNorm::apply(x, shift, scale, eps, dtype_code(out_dtype));
}

torch::Tensor run_modulated_layer_norm(BlockRunner* runner, const torch::Tensor& x, const torch::Tensor& shift,
                                       const torch::Tensor& scale, double eps,
                                       std::optional<torch::ScalarType> out_dtype) {
  auto region = [eps, out_dtype](const std::vector<torch::Tensor>& inputs) {
    return modulated_layer_norm(inputs[0], inputs[1], inputs[2], eps, out_dtype);
  };
  return run_region(runner, RegionKind::norm, region, {x, shift, scale});
}

torch::nn::Sequential adaln_modulation(int64_t hidden_size, int64_t chunks) {
  return torch::nn::Sequential(torch::nn::SiLU(),
                               torch::nn::Linear(torch::nn::LinearOptions(hidden_size, chunks * hidden_size).bias(true)));
}

torch::Tensor adaln_modulate(const torch::nn::Sequential& modulation, const torch::Tensor& c) {
  const auto* layer = (*modulation)[1]->as<torch::nn::LinearImpl>();
  return linear(torch::silu(c), layer->weight, layer->bias);
}

}  // namespace tune::nn
