// Whether LibTorch multiplies bf16/fp16 matrices natively on this CPU. It decides two things: which matmul kernels
// low-precision products take (precision/cpu_gemm.h) and whether the CPU attention core is LibTorch's fused
// scaled_dot_product_attention, whose CPU kernel multiplies in the inputs' dtype itself (nn/attention_core.h).
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

}  // namespace tune
