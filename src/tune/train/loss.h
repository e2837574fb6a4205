// Next-token cross-entropy for causal LMs.
#pragma once

#include <torch/types.h>

namespace tune::train {

// logits [B, T, V] (any float dtype), labels [B, T] int64 with -100 = ignore. Position t is scored against
// labels[t + 1]. Returns the *sum* over counted positions as a float32 scalar (callers divide by the token count
// of the whole accumulated batch, so accumulation over micro-batches equals one large batch), computed in fp32.
torch::Tensor causal_lm_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels);

// Number of positions causal_lm_loss_sum counts.
int64_t causal_lm_loss_tokens(const torch::Tensor& labels);

}  // namespace tune::train
