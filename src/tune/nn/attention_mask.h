// Additive attention masks for decoder self-attention: causal, sliding-window, packed (segment ids) and incremental
// decoding (new tokens after a key/value cache). Built once per forward and shared by every layer of a kind.
#pragma once

#include <torch/types.h>

namespace tune::nn {

// Returns a bfloat16 mask [B or 1, 1, T, past_length + T]: 0 where query i may attend to key j, the lowest
// bfloat16 value (about -3.4e38) elsewhere (not -inf, so even a fully masked row could not produce NaN). Added to
// the scores in their compute dtype before the fp32 softmax (nn/attention_core.cpp): exact where visible, the
// lowest value where hidden, whatever the dtype. bf16 only halves the mask's memory.
//   Query i sits at absolute index past_length + i; key j is visible iff j <= past_length + i.
//   sliding_window w > 0 (Mistral, Qwen2/Qwen3 sliding layers): additionally past_length + i - j < w, so a query
//   sees itself and the w - 1 keys before it (transformers' masking_utils: kv_idx > q_idx - sliding_window).
//   segment_ids [B, T] (optional, only with past_length 0): additionally j's segment must equal i's and be
//   >= 0. A padding token (segment < 0) sees only itself, which keeps its softmax finite; its output is
//   meaningless and masked from the loss. Packed segments are contiguous, so the window over indices is the
//   window over positions within a segment.
torch::Tensor make_causal_mask(int64_t query_length, int64_t past_length, const torch::Tensor& segment_ids,
                               torch::Device device, int64_t sliding_window = 0);

// 0/1 boolean form of the same rule ([B or 1, T, past_length + T], true = may attend); the additive mask is
// built from it. Exposed for tests and for kernels that take boolean masks.
torch::Tensor make_causal_allowed(int64_t query_length, int64_t past_length, const torch::Tensor& segment_ids,
                                  torch::Device device, int64_t sliding_window = 0);

}  // namespace tune::nn
