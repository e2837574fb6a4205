// CPU features behind LibTorch's low-precision matrix kernels (see cpu_gemm_mode.h).
#include "tune/core/cpu_gemm_mode.h"

#include <atomic>
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

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 7, sub-leaf 0, EDX bit `bit` (22: AMX-BF16, 23: AVX512-FP16), read directly: Debian 12's clang 14
// (the fuzzing build) rejects __builtin_cpu_supports("avx512fp16") and has no AMX feature strings. Read once:
// the mode is asked on every matrix product, and CPUID serializes the pipeline (in a virtual machine it traps to
// the hypervisor), which cost 2% of a small model's training step when it ran per product.
bool cpuid7_edx(int bit) {
  static const unsigned edx = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, value = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &value) == 0 ? 0U : value;
  }();
  return ((edx >> bit) & 1U) != 0;
}
#endif

// LibTorch's oneDNN path for bf16 (ATen's mkldnn_bf16_device_check): AVX-512 BW, VL and DQ (or AMX, which
// comes with them).
bool cpu_has_avx512_core() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return true;
#endif
}

// bf16: LibTorch multiplies bf16 matrices through oneDNN on CPUs with AVX-512 (BW, VL, DQ) or AMX (ATen's
// mkldnn_bf16_device_check), elsewhere in a reference loop. Only AMX makes that faster than tune's fp32-accumulate
// kernels: on this project's Xeon with AVX512-BF16 and no AMX, one thread, oneDNN's bf16 GEMM ran 79-85 GFLOP/s
// on Latte's and Llama's projection shapes against 131-149 for converting to fp32 + sgemm
// (scripts/bench_cpu_gemm.py), so native is chosen only where the CPU reports AMX-BF16 (oneDNN asks the kernel
// for the AMX state itself; where that is refused it runs AVX-512 kernels, a case not measured). On other
// architectures LibTorch's own kernels are kept.
bool cpu_has_native_bf16_gemm() {
#if defined(__x86_64__) || defined(__i386__)
  return cpuid7_edx(22);
#else
  return true;
#endif
}
// fp16: native with AVX512-FP16 (oneDNN's mkldnn_fp16_device_check; measured here 154 GFLOP/s against 133 for
// converting). The OS's saving of the 512-bit state is covered by the avx512f check, which the compilers' runtime
// makes with XGETBV.
bool cpu_has_native_fp16_gemm() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && cpuid7_edx(23);
#else
  return true;
#endif
}

// Measured choices, per low-precision dtype (0: bf16, 1: fp16): -1 none yet; read on every product, hence atomics.
constexpr int kUnset = -1;
std::atomic<int> measured_gemm[2] = {kUnset, kUnset};
std::atomic<int> measured_attention[2] = {kUnset, kUnset};
std::atomic<int> measured_recompute_core[2] = {kUnset, kUnset};  // inside a block recompute: recomputing core

int slot(c10::ScalarType dtype) {
  if (dtype == c10::kBFloat16) return 0;
  if (dtype == c10::kHalf) return 1;
  return -1;
}

CpuGemmMode mode_for(int dtype_slot, bool native_guess) {
  CpuGemmMode mode = CpuGemmMode::native;
  if (forced(&mode)) return mode;
  const int measured = measured_gemm[dtype_slot].load(std::memory_order_relaxed);
  if (measured != kUnset) return static_cast<CpuGemmMode>(measured);
  return native_guess ? CpuGemmMode::native : CpuGemmMode::fp32_accumulate;
}

}  // namespace

CpuGemmMode cpu_gemm_mode_for_bf16() { return mode_for(0, cpu_has_native_bf16_gemm()); }

CpuGemmMode cpu_gemm_mode_for_fp16() { return mode_for(1, cpu_has_native_fp16_gemm()); }

bool cpu_gemm_mode_forced() {
  CpuGemmMode mode = CpuGemmMode::native;
  return forced(&mode);
}

void set_measured_cpu_gemm_mode(c10::ScalarType dtype, CpuGemmMode mode) {
  if (const int s = slot(dtype); s >= 0) measured_gemm[s].store(static_cast<int>(mode));
}

void set_measured_cpu_fused_attention(c10::ScalarType dtype, bool fused) {
  if (const int s = slot(dtype); s >= 0) measured_attention[s].store(fused ? 1 : 0);
}

std::optional<bool> measured_cpu_fused_attention(c10::ScalarType dtype) {
  const int s = slot(dtype);
  if (s < 0) return std::nullopt;
  const int measured = measured_attention[s].load(std::memory_order_relaxed);
  if (measured == kUnset) return std::nullopt;
  return measured == 1;
}

void set_measured_recompute_core_recomputes(c10::ScalarType dtype, bool recomputes) {
  if (const int s = slot(dtype); s >= 0) measured_recompute_core[s].store(recomputes ? 1 : 0);
}

std::optional<bool> measured_recompute_core_recomputes(c10::ScalarType dtype) {
  const int s = slot(dtype);
  if (s < 0) return std::nullopt;
  const int measured = measured_recompute_core[s].load(std::memory_order_relaxed);
  if (measured == kUnset) return std::nullopt;
  return measured == 1;
}

namespace {
std::atomic<int> measured_nf4_fused{kUnset};
}  // namespace

bool nf4_cpu_product_forced() {
  const char* forced = std::getenv("TUNE_NF4_CPU");
  return forced != nullptr && (std::string_view(forced) == "fused" || std::string_view(forced) == "dequantize");
}

bool nf4_cpu_fused_product() {
  if (nf4_cpu_product_forced()) return std::string_view(std::getenv("TUNE_NF4_CPU")) == "fused";
  return measured_nf4_fused.load(std::memory_order_relaxed) == 1;
}

void set_measured_nf4_cpu_fused_product(bool fused) { measured_nf4_fused.store(fused ? 1 : 0); }

namespace {
constexpr int64_t kDefaultChunkMinRows = 512;
std::atomic<int64_t> measured_chunk_min_rows{kUnset};

int64_t forced_chunk_min_rows() {
  const char* value = std::getenv("TUNE_ATTENTION_CHUNK_ROWS");
  if (value == nullptr) return kUnset;
  char* end = nullptr;
  const long long rows = std::strtoll(value, &end, 10);
  return (end != value && *end == '\0' && rows > 0) ? static_cast<int64_t>(rows) : kUnset;
}
}  // namespace

int64_t attention_chunk_min_rows() {
  if (const int64_t forced = forced_chunk_min_rows(); forced != kUnset) return forced;
  const int64_t measured = measured_chunk_min_rows.load(std::memory_order_relaxed);
  return measured != kUnset ? measured : kDefaultChunkMinRows;
}

bool attention_chunk_min_rows_forced() { return forced_chunk_min_rows() != kUnset; }

void set_measured_attention_chunk_min_rows(int64_t rows) { measured_chunk_min_rows.store(rows > 0 ? rows : kUnset); }

void clear_measured_cpu_kernels() {
  for (auto& m : measured_gemm) m.store(kUnset);
  for (auto& m : measured_attention) m.store(kUnset);
  for (auto& m : measured_recompute_core) m.store(kUnset);
  measured_nf4_fused.store(kUnset);
  measured_chunk_min_rows.store(kUnset);
}

bool libtorch_cpu_kernels_native(c10::ScalarType dtype) {
  if (dtype == c10::kBFloat16) return cpu_has_avx512_core();
  if (dtype == c10::kHalf) return cpu_has_native_fp16_gemm();
  return true;
}

CpuGemmMode cpu_gemm_mode_for(c10::ScalarType dtype) {
  if (dtype == c10::kBFloat16) return cpu_gemm_mode_for_bf16();
  if (dtype == c10::kHalf) return cpu_gemm_mode_for_fp16();
  return CpuGemmMode::native;
}

}  // namespace tune
