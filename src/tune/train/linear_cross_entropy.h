// Next-token cross-entropy fused with the output projection: the loss of logits = hidden @ weight^T without ever
// holding the [tokens, vocab] logits of the whole sequence.
//
// With a 128k vocabulary and 2048 tokens the logits alone are 0.5 GiB in bf16 and 1 GiB in fp32, and the plain
// path (lm_head, cast to fp32, log_softmax, nll) keeps several such tensors from forward to backward plus their
// gradients in backward. Here forward walks the scored rows in chunks (a chunk's fp32 logits at most 256 MiB; 1 GiB on
// CUDA when the weight trains, where fewer chunks mean fewer passes over its fp32 gradient) and, when gradients will be wanted (grad mode on and an input requiring grad), turns each
// chunk's logits straight into the gradients of hidden and weight (softmax - one-hot, two products); backward only
// scales them by the incoming gradient. The logits are never recomputed; what stays from forward to backward is
// d loss / d hidden (the size of hidden, in the compute dtype) and, when the weight trains, d loss / d weight in fp32
// (the size of its gradient, which backward hands on). The idea is Liger Kernel's fused linear cross-entropy (and
// PyTorch's linear_cross_entropy), written with plain ATen ops. Its backward runs once (no retain_graph).
#pragma once

#include <torch/types.h>

namespace tune::train {

// hidden [B, T, H] (the final norm's output), weight [V, H] (lm_head, or the tied embedding), labels [B, T] int64
// with -100 = ignore. Position t is scored against labels[t + 1], as causal_lm_loss_sum (loss.h). Returns the sum
// over counted positions as a float32 scalar: causal_lm_loss_sum(linear(hidden, weight), labels) to rounding.
//
// The product runs in the autocast dtype of hidden's device when autocast is on there (as lm_head would), else in
// hidden's dtype; log-sum-exp and the softmax gradient in fp32. Gradients flow to hidden, and to weight when it
// requires grad (not for a frozen LoRA base). `chunk_rows` <= 0 picks the chunk from the vocabulary size.
// `softcap` > 0 (Gemma 2's final_logit_softcapping): the logits are softcap * tanh(logits / softcap), applied to the
// fp32 logits (LlamaForCausalLM::forward caps after its fp32 cast too).
torch::Tensor causal_lm_linear_loss_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& labels, int64_t chunk_rows = 0, double softcap = 0.0);

}  // namespace tune::train
