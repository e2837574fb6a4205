// What the chunked passes over the output layer share (linear_cross_entropy.cpp, sequence_logps.cpp): the dtype the
// product runs in, how many rows a chunk holds, a chunk's widened logits and the weight-gradient accumulation.
// Internal to train/.
#pragma once

#include <torch/torch.h>

#include <algorithm>

#include "tune/compat/torch_compat.h"

namespace tune::train::chunked {

// A chunk's fp32 logits stay under this many bytes (plus the same again in the compute dtype, and the softmax's
// temporaries): small against the model at real vocabularies, large enough for full-width products.
constexpr int64_t kChunkLogitBytes = int64_t{256} << 20;
constexpr int64_t kChunkLogitBytesCudaTrainedWeight = int64_t{1} << 30;

// The dtype the lm_head product would run in: autocast's for hidden's device when on there, else hidden's.
inline torch::ScalarType product_dtype(const torch::Tensor& hidden, const torch::Tensor& weight) {
  if (hidden.is_cuda() && compat::autocast_cuda_enabled()) return compat::autocast_cuda_dtype();
  if (hidden.is_cpu() && compat::autocast_cpu_enabled()) return compat::autocast_cpu_dtype();
  return torch::promote_types(hidden.scalar_type(), weight.scalar_type());
}

inline int64_t rows_per_chunk(int64_t requested, int64_t rows, int64_t vocab, bool cuda, bool weight_trains) {
  if (requested > 0) return requested;
  // On CUDA with a trained weight, larger chunks: each chunk adds its [V, H] weight-gradient product to the
  // accumulator (a pass over V x H in fp32), so fewer chunks move fewer bytes (measured on an H100: 256 MiB chunks
  // cost +15% of a full fine-tune's step at 8192 tokens, 1 GiB +1.4%). A frozen weight (LoRA) has no accumulator:
  // small chunks cost nothing there and keep the peak low.
  const int64_t budget = cuda && weight_trains ? kChunkLogitBytesCudaTrainedWeight : kChunkLogitBytes;
  return std::clamp<int64_t>(budget / (vocab * 4), 1, std::max<int64_t>(rows, 1));
}

// fp32 (or wider) logits of one chunk: the product in the compute dtype, then widened, as lm_head + .to(float).
inline torch::Tensor chunk_logits(const torch::Tensor& hidden_rows, const torch::Tensor& weight) {
  return torch::matmul(hidden_rows, weight.t()).to(torch::promote_types(hidden_rows.scalar_type(), torch::kFloat));
}

// Gemma 2's final soft cap on a chunk's wide logits: logits becomes cap * tanh(logits / cap). Returns
// tanh(logits / cap), whose 1 - tanh^2 the gradient through the cap needs (undefined, and logits untouched, for
// cap <= 0: no cap).
inline torch::Tensor soft_cap(torch::Tensor& logits, double cap) {
  if (cap <= 0.0) return {};
  torch::Tensor squashed = torch::tanh(logits / cap);
  logits = squashed * cap;
  return squashed;
}

// d loss / d logits before the cap, in place: times 1 - tanh^2 (nothing without a cap).
inline void gradient_through_soft_cap(torch::Tensor& grad_logits, const torch::Tensor& squashed) {
  if (squashed.defined()) grad_logits.mul_(1.0 - squashed.square());
}

// accumulator (+)= a^T b, a and b in the compute dtype, the accumulator wider: the product in the compute dtype (as
// lm_head's weight gradient is), then added. (LibTorch >= 2.12 could write cuBLAS's fp32 result straight into the
// accumulator, addmm with out_dtype; not used: the GPU machines run 2.11, where it could not be tested.)
inline void accumulate_product(torch::Tensor& accumulator, bool first, const torch::Tensor& a,
                               const torch::Tensor& b) {
  const torch::Tensor product = torch::matmul(a.t(), b);
  if (first) {
    accumulator.copy_(product);
  } else {
    accumulator.add_(product);
  }
}

}  // namespace tune::train::chunked
