// Per-sequence log-probabilities of given completions: what preference losses (DPO and its cousins) compare.
#pragma once

#include <torch/types.h>

namespace tune::train {

struct SequenceLogps {
  torch::Tensor sums;    // [rows] float32: sum over a row's scored positions of log p(label | prefix)
  torch::Tensor counts;  // [rows] float32: how many positions each row scores
};

// hidden [R, T, H] (the final norm's output), weight [V, H] (the output layer), labels [R, T] (kIgnoreIndex where
// nothing is scored); position t is scored against labels[t + 1], as causal_lm_loss_sum. Row by row through
// causal_lm_linear_loss_sum, so the fp32 [tokens, vocab] log-softmax of the batch is never whole (one row's chunk
// at a time) and a row's gradient flows to hidden (and to weight when it trains) exactly as that loss's does.
SequenceLogps causal_lm_sequence_logps(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& labels);

}  // namespace tune::train
