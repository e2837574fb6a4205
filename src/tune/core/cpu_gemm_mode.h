// How bf16/fp16 matrices are best multiplied on this CPU. Two questions with different answers on some CPUs:
// which kernels tune's low-precision products take (cpu_gemm_mode_for: precision/cpu_gemm.h), and whether
// LibTorch's own low-precision CPU kernels are vectorised at all (libtorch_cpu_kernels_native), which decides
// whether the CPU attention core may be LibTorch's fused scaled_dot_product_attention, whose kernel multiplies in
// the inputs' dtype itself (nn/attention_core.h). On this project's Xeon (AVX512-BF16, no AMX) LibTorch's bf16
// kernels are vectorised but tune's fp32-accumulate products are 1.2-1.8x faster than LibTorch's bf16 GEMM.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>

namespace tune {

// Which kernels bf16/fp16 products use on the CPU.
enum class CpuGemmMode {
  native,          // LibTorch's own (fast where the CPU has native bf16/fp16 matrix instructions)
  fp32_accumulate  // convert to fp32, MKL, round back (precision/cpu_gemm.h)
};

// The mode for a low-precision dtype on this CPU, in order: the environment variable TUNE_CPU_GEMM=native|fp32 (for
// side-by-side benchmarks and tests that pin a mode); the mode this process measured faster on its run's shapes
// (set_measured_cpu_gemm_mode, which every command that multiplies low-precision matrices calls at its start:
// recipes/cpu_kernel_choice.h); else, before any measurement (a unit test, a library caller), a guess from the
// CPU's features: native where the CPU reports the matrix instructions LibTorch's kernel was measured fast with.
CpuGemmMode cpu_gemm_mode_for_bf16();
CpuGemmMode cpu_gemm_mode_for_fp16();
// bf16 and fp16 as above; every other dtype is native (LibTorch's fp32/fp64 kernels are MKL's).
CpuGemmMode cpu_gemm_mode_for(c10::ScalarType dtype);

// Whether LibTorch's CPU kernels compute `dtype` with vector instructions here (bf16: AVX-512 BW+VL+DQ, fp16:
// AVX512-FP16, as ATen's mkldnn_bf16_device_check / mkldnn_fp16_device_check) rather than a reference loop;
// true for every other dtype. From the CPU alone: TUNE_CPU_GEMM does not change it.
bool libtorch_cpu_kernels_native(c10::ScalarType dtype);

// Whether TUNE_CPU_GEMM forces the mode (then nothing is measured for it).
bool cpu_gemm_mode_forced();
// Records the mode measured faster for bf16 or fp16 in this process (other dtypes: ignored).
void set_measured_cpu_gemm_mode(c10::ScalarType dtype, CpuGemmMode mode);
// The measured choice between LibTorch's fused attention kernel (true) and tune's own core (false) for bf16 or
// fp16 on the CPU, when this process made one (nn/attention_core.h follows it).
void set_measured_cpu_fused_attention(c10::ScalarType dtype, bool fused);
std::optional<bool> measured_cpu_fused_attention(c10::ScalarType dtype);
// Inside a checkpointed block's recompute (grad mode on, the graph living through that block's backward alone):
// whether tune's attention core recomputes its probabilities in backward as well (true) rather than keeping them
// (false, a second product saved), as this process measured for bf16 or fp16 training on its run's shapes
// (recipes/cpu_kernel_choice.h); unset: the plain core.
void set_measured_recompute_core_recomputes(c10::ScalarType dtype, bool recomputes);
std::optional<bool> measured_recompute_core_recomputes(c10::ScalarType dtype);
// QLoRA's NF4 products on the CPU: whether they dequantise the weight in fp32 slices for sgemm
// (precision/nf4_cpu_product.h) rather than whole for the matrix-product kernels: TUNE_NF4_CPU=fused|dequantize
// (nf4_cpu_product_forced), else what this process measured faster on its NF4 weights (recipes/cpu_kernel_choice),
// else dequantise (measured faster on this project's AMX Xeon, docs/BENCHMARKS.md).
bool nf4_cpu_fused_product();
bool nf4_cpu_product_forced();
void set_measured_nf4_cpu_fused_product(bool fused);
// The fewest query rows in a chunk of tune's recomputing attention core under a mask (nn/attention_core.h's
// recompute_chunk_rows): TUNE_ATTENTION_CHUNK_ROWS=N (a positive integer) for benchmarks and tests that pin it, else
// what this process measured fastest on its run's causal shapes (recipes/cpu_kernel_choice.h), else 512. Smaller
// chunks skip more of a causal [T, T] but multiply smaller matrices: which pays depends on the CPU's kernels
// (512 on the AVX512-BF16 Xeon's fp32-accumulate products; 128 on the AVX512-BF16 EPYC's native ones).
int64_t attention_chunk_min_rows();
bool attention_chunk_min_rows_forced();
void set_measured_attention_chunk_min_rows(int64_t rows);
// Forgets the measured choices (tests).
void clear_measured_cpu_kernels();

}  // namespace tune
