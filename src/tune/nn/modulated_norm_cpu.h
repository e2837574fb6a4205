// The modulated norms of nn/adaln.h and DiT's gated residual, forward and backward, as CPU kernels over rows.
//
// Why: the autograd form's backward (recompute the normalised row, multiply by 1 + scale, ATen's LayerNorm
// backward, the token sums for shift and scale, and for the gated form the residual sum and the gate's and branch's
// products) makes about fifteen passes over [N, T, D] tensors, several of them bf16 elementwise ops that widen and
// narrow every element, and its forward (the gated sum, LayerNorm, the multiply and the add) five more, two of them
// into fp32 temporaries of the whole input's size. Latte-S/2's step spent 13% of its time in the backward alone on
// an AMX Xeon (282 of 2100 ms, 24 norms), where the products are fast. Here each row is read once and its results
// written once; the row's own temporaries live in a few D-float scratch rows.
//
// The values are the autograd form's maths with its dtypes' roundings (1 + scale in scale's dtype, the gated sum's
// product rounded to the product's dtype, the residual gradient rounded to it before the gate's and branch's
// products, the output rounded once to its dtype), with sums taken in another order (the row statistics two-pass
// per row where ATen's LayerNorm uses Welford's update): equal to it within fp32 rounding, not bit for bit.
#pragma once

#include <torch/types.h>

namespace tune::nn {

// The gated form's extra inputs: sum = x + gate * branch was the norm's input (gate [N, D], branch [N, T, D], both
// bf16), and `grad_sum_outside` (fp32 [N, T, D], or undefined) the residual path's gradient of that sum.
struct GatedResidualInputs {
  torch::Tensor gate, branch, grad_sum_outside;
};

struct ModulatedNormGradients {
  torch::Tensor input;          // fp32 [N, T, D]: x's gradient (gated form: the sum's, the residual path's included)
  torch::Tensor shift, scale;   // fp32 [N, D]: sums over the T tokens of each row group
  torch::Tensor gate, branch;   // gated form only: fp32 [N, D] and bf16 [N, T, D]
};

// The forward: in = x (or x + gate * branch with `gated`, returned as `sum`), its row statistics (mean and rstd,
// [N, T, 1] as native_layer_norm's, which the backward takes), and output = LayerNorm(in) * (1 + scale) + shift in
// `out_dtype` (bf16 or fp32).
struct ModulatedNormForward {
  torch::Tensor sum, output, mean, rstd;
};

// Whether the forward takes these tensors: CPU; x fp32 contiguous [N, T, D]; shift and scale [N, D], fp32 or bf16,
// with unit inner stride; out_dtype fp32 or bf16; gated: gate and branch as for the backward.
bool modulated_norm_forward_fits(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                 torch::ScalarType out_dtype, const GatedResidualInputs* gated = nullptr);

ModulatedNormForward modulated_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& shift,
                                                const torch::Tensor& scale, double eps, torch::ScalarType out_dtype,
                                                const GatedResidualInputs* gated = nullptr);

// Whether the kernel takes these tensors: CPU; x fp32 contiguous [N, T, D] (the norm's input, or the gated form's
// residual x); mean and rstd fp32 with N * T elements (native_layer_norm's); grad_normed contiguous, fp32 or bf16,
// x's shape; scale [N, D] with unit inner stride; gated: gate and branch bf16 (gate [N, D] with unit inner stride,
// branch contiguous), grad_sum_outside undefined or fp32 contiguous. Anything else takes the autograd form.
bool modulated_norm_backward_fits(const torch::Tensor& grad_normed, const torch::Tensor& x, const torch::Tensor& mean,
                                  const torch::Tensor& rstd, const torch::Tensor& scale,
                                  const GatedResidualInputs* gated = nullptr);

// The gradients of normed = LayerNorm(in) * (1 + scale) + shift (over the last dim, no affine, eps folded into
// rstd) given grad_normed, where in = x, or in = x + gate * branch with `gated`. Parallel over row groups (and over
// token ranges with partial sums where there are fewer groups than threads).
ModulatedNormGradients modulated_norm_backward_cpu(const torch::Tensor& grad_normed, const torch::Tensor& x,
                                                   const torch::Tensor& mean, const torch::Tensor& rstd,
                                                   const torch::Tensor& scale,
                                                   const GatedResidualInputs* gated = nullptr);

// A DiT block's gated residual, sum = x + gate * branch (x fp32 [N, T, D], gate bf16 [N, D], branch bf16 [N, T, D]:
// autocast's dtypes), as one pass each way: forward the sum (the product rounded to bf16, as the bf16 multiply
// writes it), backward the branch's gradient bf16(bf16(grad) * gate) and the gate's, the token sum of
// bf16(bf16(grad) * branch), without the product's tensor or its gradient's. x's gradient is the incoming one.
bool gated_residual_fits(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& branch);
torch::Tensor gated_residual_forward_cpu(const torch::Tensor& x, const torch::Tensor& gate,
                                         const torch::Tensor& branch);
struct GatedResidualGradients {
  torch::Tensor gate, branch;  // fp32 [N, D] (a token sum), bf16 [N, T, D]
};
GatedResidualGradients gated_residual_backward_cpu(const torch::Tensor& grad_sum, const torch::Tensor& gate,
                                                   const torch::Tensor& branch);

}  // namespace tune::nn
