// Matrix products of bf16/fp16 tensors on CPUs where LibTorch's own kernel for them is not the fast one.
//
// LibTorch 2.x multiplies bf16 matrices on the CPU through oneDNN only when the CPU has AVX-512 (BW, VL and DQ)
// or AMX, and fp16 ones only with AVX512-FP16/AMX-FP16; elsewhere (AVX2-only CPUs) it falls back to a reference
// loop: 0.3-0.5 GFLOP/s on one thread against 11-17 for fp32 (measured with torch 2.13 on an AMD EPYC), which
// makes bf16 autocast, tune's default, ~40x slower than fp32 training. And where oneDNN's bf16 path runs without
// AMX it is still slower than fp32: on this project's Xeon (AVX512-BF16), 79-85 GFLOP/s against 145-153 for
// MKL's sgemm (scripts/bench_cpu_gemm.py). `install_cpu_gemm()` replaces LibTorch's CPU kernels of mm, addmm, bmm
// and baddbmm (and their out= forms) with ones that, for bf16/fp16 operands, accumulate the product in fp32 and
// round it once to the operands' dtype: the numerics of oneDNN's bf16 GEMM, at fp32 speed. They convert the
// operands to fp32 a slice at a time (a block of rows of the left operand, the right one whole; a group of whole
// matrices of a batch) and call LibTorch's fp32 kernel, so the fp32 transients are a few hundred KiB plus the
// converted right operand (a weight, or a layer input in a weight gradient); a right operand over 64 MiB as fp32
// is instead read in place by MKL's mixed-precision GEMM (cblas_gemm_bf16bf16f32 / cblas_gemm_f16f16f32, which the
// kernels used for everything before: as fast as oneDNN's bf16 here, not faster). Every other dtype goes to
// LibTorch's own kernel unchanged. linear, matmul and autograd's backward formulas all reach these four
// operators, so forward and backward of every projection take the fast path.
#pragma once

#include <ATen/core/Tensor.h>

#include "tune/core/cpu_gemm_mode.h"

#include <cstdint>
#include <string>

namespace tune::precision {

// The mode decision lives in core (the CPU attention core follows it too); named here as before.
using tune::CpuGemmMode;
using tune::cpu_gemm_mode_for_bf16;
using tune::cpu_gemm_mode_for_fp16;

// Registers the replacement kernels once per process when either mode above is fp32_accumulate (idempotent; a
// no-op while both are native, so call it again after the measured choice). Must run before the first product
// whose speed matters; it changes no result beyond the summation order of the fp32 accumulation.
void install_cpu_gemm();

// The two candidates of the measured choice (recipes/cpu_kernel_choice.h), callable whatever the mode: LibTorch's
// own CPU kernel, and the fp32-accumulate one (whose calls here are not counted below). 2-D operands of one
// dtype.
at::Tensor libtorch_mm(const at::Tensor& a, const at::Tensor& b);
at::Tensor fp32_accumulate_mm(const at::Tensor& a, const at::Tensor& b);

// Number of products that took the fp32_accumulate path in this process: how tests and logs show it is in use.
int64_t cpu_gemm_fp32_accumulate_calls();

// One line for the run log, e.g. "bf16 CPU matmuls: fp32-accumulate kernels (no native bf16 GEMM on this CPU)".
std::string describe_cpu_gemm();

}  // namespace tune::precision
