// bf16 copies of fp32 tensors that lose nothing: under bf16 autocast most parameter gradients are bf16 products
// widened to fp32 by the cast's backward (ToCopyBackward), so their low 16 bits are zero and a bf16 copy holds the
// same values in half the bytes (train/compact_gradients keeps gradients so).
#pragma once

#include <torch/types.h>

namespace tune::precision {

// A bf16 tensor with exactly the values of `fp32` (a contiguous CPU float32 tensor), or an undefined tensor when
// any element has a nonzero low half (bf16 cannot hold it). One pass over the input: the check and the copy are
// the same loop (the upper 16 bits of each float, kept as they are, so NaN payloads and signed zeros survive).
torch::Tensor to_bf16_if_exact(const torch::Tensor& fp32);

}  // namespace tune::precision
