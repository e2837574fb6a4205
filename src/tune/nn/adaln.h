// Adaptive layer norm (adaLN / adaLN-Zero, DiT): a parameter-free LayerNorm whose output is shifted and scaled
// by vectors regressed from the conditioning, and the SiLU + Linear head that regresses them.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace tune::nn {

class BlockRunner;

// LayerNorm without affine parameters over the last dimension, computed in at least fp32 whatever the input
// dtype (bf16 statistics lose too much); returns the compute dtype (fp32, or fp64 for an fp64 input).
torch::Tensor layer_norm_fp32(const torch::Tensor& input, double eps = 1e-6);

// DiT's modulate: x [N, T, D], shift and scale [N, D] -> x * (1 + scale) + shift, broadcast over T.
torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale);

// modulate(layer_norm_fp32(x, eps), shift, scale) as one autograd node: the same values, but backward keeps x, the
// per-row mean and 1/std and scale, and recomputes the normalised x from them, where the two-op form keeps the
// fp32 normalised x for the multiply's backward beside the LayerNorm's own x: one [N, T, D] fp32 tensor less per
// norm (two per Latte block: 12.6 MB at Latte-S/2's 4096 tokens), as fused LayerNorm kernels do. Gradients flow to
// x, shift and scale (each only where it requires one).
// `out_dtype` (where the output only feeds products in that dtype: autocast's compute dtype, nn::linear's input):
// the output written in it, the same values as the fp32 output cast to it, without the fp32 tensor or the separate
// cast pass; backward takes the gradient in it as it comes (the values of its fp32 cast). Unset: the two-op form's
// dtype.
torch::Tensor modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                   double eps = 1e-6, std::optional<torch::ScalarType> out_dtype = std::nullopt);

// A DiT block's gated residual, x + gate.unsqueeze(1) * branch (x [N, T, D], gate [N, D], branch [N, T, D]): its
// values, and its gradients to fp32 rounding; on the CPU in autocast's dtypes (fp32 x, bf16 gate and branch) one
// pass each way (nn/modulated_norm_cpu.h), elsewhere those two ops.
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& branch);

// A DiT block's gated residual and the modulated norm that follows it, as one autograd node:
//   sum = x + gate * branch   (gate [N, D] broadcast over T, as DiT's `x + gate.unsqueeze(1) * attn(...)`)
//   normed = modulated_layer_norm(sum, shift, scale, eps)
// Returns {sum, normed} with the two-op form's values bit for bit. Backward recomputes `sum` from x and branch
// instead of keeping it for the norm: x is kept anyway by the block's first norm and branch by the gate's gradient,
// so the fp32 [N, T, D] sum (6 MiB a Latte-S/2 block at 4096 tokens) is what this saves. Gradients flow to x, gate,
// branch, shift and scale (each only where it requires one); `sum`'s own gradient (the residual path) is added to
// the norm's.
struct GatedResidualNorm {
  torch::Tensor sum, normed;
};
// `out_dtype`: `normed`'s, as modulated_layer_norm's.
GatedResidualNorm gated_residual_modulated_layer_norm(const torch::Tensor& x, const torch::Tensor& gate,
                                                      const torch::Tensor& branch, const torch::Tensor& shift,
                                                      const torch::Tensor& scale, double eps = 1e-6,
                                                      std::optional<torch::ScalarType> out_dtype = std::nullopt);

// modulated_layer_norm as a norm region of `runner` (selective checkpointing recomputes it whole); null runner: a
// plain call. What a DiT-style block calls for its modulated norms.
torch::Tensor run_modulated_layer_norm(BlockRunner* runner, const torch::Tensor& x, const torch::Tensor& shift,
                                       const torch::Tensor& scale, double eps = 1e-6,
                                       std::optional<torch::ScalarType> out_dtype = std::nullopt);

// Sequential(SiLU, Linear(hidden, chunks * hidden)): parameters "1.weight" and "1.bias", as DiT's
// adaLN_modulation. Its output is split with .chunk(chunks, 1).
torch::nn::Sequential adaln_modulation(int64_t hidden_size, int64_t chunks);

// A modulation from adaln_modulation's layers: SiLU(c), then its linear through nn::linear (ATen's linear, the weight
// cast again in backward under autocast rather than a copy kept: nn/linear.h) instead of the Sequential's forward.
torch::Tensor adaln_modulate(const torch::nn::Sequential& modulation, const torch::Tensor& c);

}  // namespace tune::nn
