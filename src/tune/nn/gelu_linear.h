// A linear layer applied to GELU(tanh) of its input, as DiT-style MLPs end (fc2(gelu(fc1(x)))), in two autograd
// forms with the same values: the plain one (autograd keeps GELU's input for GELU and its output for the layer's
// weight gradient) and one that keeps the input alone and recomputes GELU in backward (what a block whose graph
// lives until backward takes: run_gelu_linear below).
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace tune::nn {

class BlockRunner;

// linear(gelu(hidden, "tanh"), weight, bias), the same ops as the plain form (under autocast the same casts: the
// product in the output's dtype, the weight's and bias's gradients cast back to theirs), but autograd keeps
// `hidden` and the fp32 weight only: backward rebuilds gelu(hidden) for the weight's gradient and frees it before
// the input's gradient is made. It trades one elementwise GELU in backward for the [rows, inner] activation (and
// the weight's compute-dtype copy) kept from forward to backward. No double backward.
torch::Tensor gelu_linear_recomputing(const torch::Tensor& hidden, const torch::Tensor& weight,
                                      const torch::Tensor& bias);

// linear(gelu(hidden, "tanh"), weight, bias) keeping what the plain form keeps (GELU's input, and its output for the
// weight's gradient) but with the recomputing form's backward memory: the output is dropped as soon as the weight's
// gradient is made, before the input's gradient exists, and GELU's backward writes over that gradient. The plain
// form holds GELU's input and output and the gradient into the output while it makes a fourth tensor of that size
// (GELU's input gradient); this one holds two at most. The same ops and values as the other forms.
torch::Tensor gelu_linear_keeping(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias);

// Whether run_gelu_linear takes the keeping form: in a graph that lives only through the current block's backward
// (a checkpointed block's recompute: grad mode on, not `kept_until_backward`), where keeping GELU's output costs
// nothing for long and recomputing it would cost a GELU, and the weight trains. A block recompute's backward is
// where a `full` step peaks (Latte-S/2: 36 -> 24 MiB of [tokens, inner] tensors at that moment).
inline bool gelu_linear_keeps(bool grad_mode, bool kept_until_backward, bool weight_trains) {
  return grad_mode && !kept_until_backward && weight_trains;
}

// Whether run_gelu_linear takes the recomputing form: where autograd would keep the activation until backward
// (`kept_until_backward`, nn::graph_kept_until_backward: grad mode on outside a checkpointed block's recompute, in
// selective checkpointing's plainly run blocks, or in a multi-block segment's recompute before its last block) and the layer's weight trains (a frozen weight's gradient needs no activation: the plain
// form then keeps GELU's input alone too). The activation estimates ask this for each kind of block.
inline bool gelu_linear_recomputes(bool kept_until_backward, bool weight_trains) {
  return kept_until_backward && weight_trains;
}

// What a block calls for linear(gelu(hidden), weight, bias): the form gelu_linear_recomputes, then
// gelu_linear_keeps, give for grad mode, nn::graph_kept_until_backward, `runner` and whether `weight` requires grad;
// the plain form runs GELU as the runner's activation region.
torch::Tensor run_gelu_linear(BlockRunner* runner, const torch::Tensor& weight, const torch::Tensor& bias,
                              const torch::Tensor& hidden);
inline torch::Tensor run_gelu_linear(BlockRunner* runner, const torch::nn::Linear& layer, const torch::Tensor& hidden) {
  return run_gelu_linear(runner, layer->weight, layer->bias, hidden);
}

}  // namespace tune::nn
