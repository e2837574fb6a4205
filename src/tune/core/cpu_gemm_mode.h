// How bf16/fp16 matrices are best multiplied on this CPU. Two questions with different answers on some CPUs:
// which kernels tune's low-precision products take (cpu_gemm_mode_for: precision/cpu_gemm.h), and whether
// LibTorch's own low-precision CPU kernels are vectorised at all (libtorch_cpu_kernels_native), which decides
// whether the CPU attention core may be LibTorch's fused scaled_dot_product_attention, whose kernel multiplies in
// the inputs' dtype itself (nn/attention_core.h). On this project's Xeon (AVX512-BF16, no AMX) LibTorch's bf16
// kernels are vectorised but tune's fp32-accumulate products are 1.2-1.8x faster than LibTorch's bf16 GEMM.
#pragma once

#include <c10/core/ScalarType.h>

namespace tune {

// Which kernels bf16/fp16 products use on the CPU.
enum class CpuGemmMode {
  native,          // LibTorch's own (fast where the CPU has native bf16/fp16 matrix instructions)
  fp32_accumulate  // convert to fp32, MKL, round back (precision/cpu_gemm.h)
};

// The mode for a low-precision dtype on this CPU: native when LibTorch has a fast kernel for it here, else
// fp32_accumulate. The environment variable TUNE_CPU_GEMM=native|fp32 overrides (for side-by-side benchmarks).
CpuGemmMode cpu_gemm_mode_for_bf16();
CpuGemmMode cpu_gemm_mode_for_fp16();
// bf16 and fp16 as above; every other dtype is native (LibTorch's fp32/fp64 kernels are MKL's).
CpuGemmMode cpu_gemm_mode_for(c10::ScalarType dtype);

// Whether LibTorch's CPU kernels compute `dtype` with vector instructions here (bf16: AVX-512 BW+VL+DQ, fp16:
// AVX512-FP16, as ATen's mkldnn_bf16_device_check / mkldnn_fp16_device_check) rather than a reference loop;
// true for every other dtype. From the CPU alone: TUNE_CPU_GEMM does not change it.
bool libtorch_cpu_kernels_native(c10::ScalarType dtype);

}  // namespace tune
