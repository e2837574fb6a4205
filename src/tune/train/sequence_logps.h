// Per-sequence log-probabilities of given completions: what preference losses (DPO and its cousins) compare.
#pragma once

#include <torch/types.h>

namespace tune::train {

struct SequenceLogps {
  torch::Tensor sums;    // [rows] float32: sum over a row's scored positions of log p(label | prefix)
  torch::Tensor counts;  // [rows] float32: how many positions each row scores
};

// hidden [R, T, H] (the final norm's output), weight [V, H] (the output layer), labels [R, T] (kIgnoreIndex where
// nothing is scored); position t is scored against labels[t + 1], as causal_lm_loss_sum. The scored positions go
// through the output layer in chunks (the fp32 [tokens, vocab] log-softmax is never whole), and backward recomputes
// each chunk's logits (one more output-layer product than a summed loss), so what stays from forward to backward is
// hidden itself and the positions: no per-row weight gradient, whatever the number of rows.
// `chunk_rows` > 0 sets the scored positions per chunk (tests); <= 0 picks it from the vocabulary size.
// `softcap` > 0 (Gemma 2): the fp32 logits are softcap * tanh(logits / softcap), as causal_lm_linear_loss_sum's.
// The scored positions per chunk causal_lm_sequence_logps takes (chunk_rows <= 0) for `scored` positions at this
// vocabulary, on CUDA or not, with the output layer trained or frozen: for memory estimates.
int64_t sequence_logps_chunk_rows(int64_t scored, int64_t vocab, bool cuda, bool weight_trains);

SequenceLogps causal_lm_sequence_logps(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& labels, int64_t chunk_rows = 0, double softcap = 0.0);

// Rows that hold several sequences (packed without padding): `sequence_ids` [R, T] int64 names the sequence each
// position belongs to (0 .. sequences - 1; anything where labels is kIgnoreIndex), and the sums and counts are per
// sequence ([sequences]): the label at t + 1 counts for sequence_ids[t + 1]. The caller keeps a sequence's
// positions contiguous and never labels a sequence's first position (it would be scored against the sequence before).
SequenceLogps causal_lm_sequence_logps(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& labels, const torch::Tensor& sequence_ids,
                                       int64_t sequences, int64_t chunk_rows = 0, double softcap = 0.0);

}  // namespace tune::train
