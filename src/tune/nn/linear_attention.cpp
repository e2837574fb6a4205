#include "tune/nn/linear_attention.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <stdexcept>

namespace tune::nn {

torch::Tensor relu_linear_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                    double eps) {
  if (query.dim() != 4 || key.sizes() != query.sizes() || value.sizes() != query.sizes()) {
    throw std::invalid_argument("relu_linear_attention: query, key and value must all be [B, H, N, d]");
  }
  // fp32 at least; a float64 reference stays float64. Autocast is off in here, or it would cast the fp32 operands
  // of the two matmuls back to bf16 (the official Sana code turns it off around its linear attention for the same
  // reason: NaN losses).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const auto compute = query.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const auto q = query.to(compute);
  const auto k = key.to(compute);
  // [B, H, N, d + 1]: the appended ones make the last output column the normaliser sum_m k_m . q_n.
  const auto v = torch::constant_pad_nd(value.to(compute), {0, 1}, 1.0);
  const auto vk = torch::matmul(v.transpose(-1, -2), k);      // [B, H, d + 1, d]
  const auto out = torch::matmul(q, vk.transpose(-1, -2));    // [B, H, N, d + 1]
  const auto d = value.size(-1);
  return (out.narrow(-1, 0, d) / (out.narrow(-1, d, 1) + eps)).to(query.scalar_type());
}

}  // namespace tune::nn
