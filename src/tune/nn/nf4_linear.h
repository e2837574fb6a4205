// The product of an input with a frozen NF4 weight (QLoRA's base layers): x W^T where W is dequantised for the
// product and freed at once, in forward and again in backward, so no dequantised copy outlives its matmul.
#pragma once

#include <torch/types.h>

#include "tune/precision/nf4.h"

namespace tune::nn {

// input [..., in] times the dequantised weight [out, in] transposed: [..., out]. The product runs in the compute dtype:
// the autocast dtype inside an autocast scope of the input's device, else the input's own dtype; the weight is
// dequantised to the dtype it was quantised from (bitsandbytes' values) and cast to it, as bitsandbytes' matmul_4bit. Differentiable with respect to `input` only (the
// weight is frozen and gets no gradient); backward dequantises again rather than keeping the weight, and saves
// nothing but the weight's (shared, packed) fields. Under activation checkpointing the recompute dequantises again.
torch::Tensor nf4_linear(const torch::Tensor& input, const precision::Nf4Tensor& weight);

}  // namespace tune::nn
