// ReLU linear attention, the attention of Sana's transformer blocks (diffusers' SanaLinearAttnProcessor2_0, the
// official LiteLA) and of DC-AE's EfficientViT blocks: out_n = sum_m v_m (k_m . q_n) / (sum_m k_m . q_n + eps)
// with q and k already through ReLU. Cost is linear in the token count: the [d, d] product v^T k is formed once.
#pragma once

#include <torch/types.h>

namespace tune::nn {

// query, key, value [B, H, N, d] (ReLU already applied to query and key by the caller). The products run in fp32
// whatever the inputs' dtype, under autocast too (both references cast q, k, v to fp32, and the official code
// disables autocast around it: a sum over thousands of tokens in bf16 would lose the normaliser); the result
// [B, H, N, d] comes back in query's dtype. The normaliser is a column of ones appended to v (so sum_m k_m . q_n
// comes out of the same product), plus eps: diffusers uses 1e-15, the official Sana code 1e-8.
torch::Tensor relu_linear_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                    double eps);

}  // namespace tune::nn
