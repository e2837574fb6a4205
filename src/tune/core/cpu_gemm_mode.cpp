// CPU features behind LibTorch's low-precision matrix kernels (see cpu_gemm_mode.h).
#include "tune/core/cpu_gemm_mode.h"

#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tune {
namespace {

// TUNE_CPU_GEMM=native|fp32 forces a mode for both dtypes; unset or anything else: decide from the CPU.
bool forced(CpuGemmMode* mode) {
  const char* value = std::getenv("TUNE_CPU_GEMM");
  if (value == nullptr) return false;
  const std::string_view text(value);
  if (text == "native") *mode = CpuGemmMode::native;
  else if (text == "fp32") *mode = CpuGemmMode::fp32_accumulate;
  else return false;
  return true;
}

// The CPU features LibTorch's oneDNN path requires before it multiplies bf16 (AVX-512 BW+VL+DQ) or fp16
// (AVX512-FP16) matrices natively (ATen's mkldnn_bf16_device_check / mkldnn_fp16_device_check); without them
// it runs a reference loop. On other architectures LibTorch's own kernels are kept.
bool cpu_has_native_bf16_gemm() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return true;
#endif
}
// AVX512-FP16 is read from CPUID (leaf 7, sub-leaf 0, EDX bit 23) rather than __builtin_cpu_supports: Debian 12's
// clang 14 (the fuzzing build) rejects the "avx512fp16" feature string. The OS's saving of the 512-bit state is
// covered by the avx512f check, which the compilers' runtime makes with XGETBV.
bool cpu_has_native_fp16_gemm() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return __builtin_cpu_supports("avx512f") && ((edx >> 23) & 1U) != 0;
#else
  return true;
#endif
}

}  // namespace

CpuGemmMode cpu_gemm_mode_for_bf16() {
  CpuGemmMode mode = CpuGemmMode::native;
  if (forced(&mode)) return mode;
  return cpu_has_native_bf16_gemm() ? CpuGemmMode::native : CpuGemmMode::fp32_accumulate;
}

CpuGemmMode cpu_gemm_mode_for_fp16() {
  CpuGemmMode mode = CpuGemmMode::native;
  if (forced(&mode)) return mode;
  return cpu_has_native_fp16_gemm() ? CpuGemmMode::native : CpuGemmMode::fp32_accumulate;
}

CpuGemmMode cpu_gemm_mode_for(c10::ScalarType dtype) {
  if (dtype == c10::kBFloat16) return cpu_gemm_mode_for_bf16();
  if (dtype == c10::kHalf) return cpu_gemm_mode_for_fp16();
  return CpuGemmMode::native;
}

}  // namespace tune
