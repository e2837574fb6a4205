// Attention masks: the visibility rule in boolean form, then its additive float32 form.
#include "tune/nn/attention_mask.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <stdexcept>

namespace tune::nn {

torch::Tensor make_causal_allowed(int64_t query_length, int64_t past_length, const torch::Tensor& segment_ids,
                                  torch::Device device, int64_t sliding_window) {
  if (sliding_window < 0) throw std::invalid_argument(fmt::format("sliding_window must be >= 0, got {}", sliding_window));
  const auto long_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor query_index = torch::arange(past_length, past_length + query_length, long_options);
  const torch::Tensor key_index = torch::arange(0, past_length + query_length, long_options);
  torch::Tensor allowed = key_index.unsqueeze(0) <= query_index.unsqueeze(1);  // [T, S]
  if (sliding_window > 0) allowed &= (query_index.unsqueeze(1) - key_index.unsqueeze(0)) < sliding_window;
  allowed = allowed.unsqueeze(0);                                               // [1, T, S]
  if (!segment_ids.defined()) return allowed;

  if (past_length != 0) {
    // Decoding appends to one running sequence per row; packed rows would need per-segment caches.
    throw std::invalid_argument("segment_ids cannot be combined with a key/value cache (decoding is unpacked)");
  }
  if (segment_ids.dim() != 2 || segment_ids.size(1) != query_length) {
    throw std::invalid_argument(fmt::format("segment_ids must be [batch, {}], got {}", query_length,
                                            fmt::join(segment_ids.sizes(), "x")));
  }
  const torch::Tensor segments = segment_ids.to(device, torch::kInt64);
  const torch::Tensor same_segment = segments.unsqueeze(2) == segments.unsqueeze(1);  // [B, T, T]
  const torch::Tensor real_token = (segments >= 0).unsqueeze(2);
  const torch::Tensor self = torch::eye(query_length, torch::TensorOptions().dtype(torch::kBool).device(device)).unsqueeze(0);
  return (allowed & same_segment & real_token) | (self & real_token.logical_not());
}

torch::Tensor make_causal_mask(int64_t query_length, int64_t past_length, const torch::Tensor& segment_ids,
                               torch::Device device, int64_t sliding_window) {
  const torch::Tensor allowed = make_causal_allowed(query_length, past_length, segment_ids, device, sliding_window);
  // bf16 holds both values a mask needs (0 and a huge negative) in half the bytes of float32: the mask lives
  // through the whole forward and backward, T x T per sequence. Adding it to float32 scores is exact.
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  const torch::Tensor blocked = torch::full({}, std::numeric_limits<c10::BFloat16>::lowest(), bf16);
  return torch::where(allowed, torch::zeros({}, bf16), blocked).unsqueeze(1);
}

}  // namespace tune::nn
