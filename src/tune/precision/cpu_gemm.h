// Matrix products of bf16/fp16 tensors on CPUs that LibTorch has no fast kernel for.
//
// LibTorch 2.x multiplies bf16 matrices on the CPU through oneDNN only when the CPU has AVX-512 (BW, VL and DQ)
// or AMX, and fp16 ones only with AVX512-FP16/AMX-FP16; elsewhere (every AVX2-only CPU, this project's AMD EPYC
// machines among them) it falls back to a reference loop: 0.3-0.5 GFLOP/s on one thread against 11-17 for fp32
// (measured with torch 2.13), which makes bf16 autocast, tune's default, ~40x slower than fp32 training.
// `install_cpu_gemm()` replaces LibTorch's CPU kernels of mm, addmm, bmm and baddbmm (and their out= forms) with
// ones that, for bf16/fp16 operands, accumulate the product in fp32 and round it once to the operands' dtype: the
// numerics oneDNN's bf16 GEMM has, at fp32 speed. They call MKL's mixed-precision GEMM (cblas_gemm_bf16bf16f32,
// cblas_gemm_f16f16f32; exported by LibTorch's MKL build, 84 GFLOP/s on one thread here against 81 for sgemm),
// which reads the low-precision operands in place, so the only transient is the fp32 result; without MKL they
// convert the operands to fp32 and use LibTorch's fp32 kernel. Every other dtype goes to LibTorch's own kernel
// unchanged. linear, matmul and autograd's backward formulas all reach these four operators, so forward and
// backward of every projection take the fast path.
#pragma once

#include "tune/core/cpu_gemm_mode.h"

#include <cstdint>
#include <string>

namespace tune::precision {

// The mode decision lives in core (the CPU attention core follows it too); named here as before.
using tune::CpuGemmMode;
using tune::cpu_gemm_mode_for_bf16;
using tune::cpu_gemm_mode_for_fp16;

// Registers the replacement kernels once per process when either mode above is fp32_accumulate (idempotent; a
// no-op otherwise). Must run before the first product whose speed matters; it changes no result beyond the
// summation order of the fp32 accumulation.
void install_cpu_gemm();

// Number of products that took the fp32_accumulate path in this process: how tests and logs show it is in use.
int64_t cpu_gemm_fp32_accumulate_calls();

// One line for the run log, e.g. "bf16 CPU matmuls: fp32-accumulate kernels (no native bf16 GEMM on this CPU)".
std::string describe_cpu_gemm();

}  // namespace tune::precision
