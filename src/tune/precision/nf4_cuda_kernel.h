// The NF4 dequantisation as one CUDA kernel, compiled at first use by ATen's jiterator (NVRTC): it reads the packed
// bytes (half a byte per weight) and writes the dequantised weight, where the ATen operator chain makes float32
// transients (~14 bytes of traffic per weight, against 2.5). Opt-in (TUNE_NF4_KERNEL=jit), because as written it
// LOST: on an H200 (docs/BENCHMARKS.md, 2026-11-26) this kernel took 65 ms of GPU time per QLoRA step (333 calls,
// ~110 GB/s: the broadcast inputs and the uint8-to-bfloat16 dynamic cast leave the jiterator's slow, non-vectorised
// path) against ~21 ms for the chain's own kernels. Bit for bit with the codec (the CUDA test), and the place to
// start from for a vectorised form.
#pragma once

#include <torch/types.h>

#include <array>
#include <optional>

#include "tune/precision/nf4.h"

namespace tune::precision {

// code[nibble] * block_absmax in float32, rounded once to out_dtype: the values of dequantize_nf4, computed on the
// GPU by one kernel. `block_absmax` is the float32 absmax per block (nested quantisation already undone), on the
// tensor's device. nullopt where the kernel does not apply and the caller should use the operator chain: a CPU
// tensor, a LibTorch without CUDA, a weight whose size is not a whole number of blocks, TUNE_NF4_KERNEL unset or not
// "jit", or a kernel that failed to compile (logged once; then never tried again in this process).
std::optional<torch::Tensor> dequantize_nf4_cuda_kernel(const Nf4Tensor& tensor, const torch::Tensor& block_absmax,
                                                        torch::ScalarType out_dtype);

// Whether the last dequantize_nf4_cuda_kernel call ran the kernel (the CUDA test asks, so a silent fallback to the
// operator chain fails it).
bool nf4_cuda_kernel_ran();

// Three bfloat16 tensors whose sum, taken in float32 as (hi + mid) + lo, is `values` (float32) exactly: the kernel's
// inputs share bfloat16 as their common dtype, so its output is written as bfloat16 directly (one rounding), while
// the absmax keeps all 24 bits. Exact because each part takes the next 8 significant bits of what is left (each
// residual is exact in float32 by Sterbenz's lemma) and bfloat16 has float32's exponent range (values beyond
// bfloat16's largest, ~3.39e38, would round to infinity: no block absmax comes near).
std::array<torch::Tensor, 3> split_into_bf16_parts(const torch::Tensor& values);

}  // namespace tune::precision
