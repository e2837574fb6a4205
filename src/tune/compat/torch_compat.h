// The one place where LibTorch 1.13 and 2.x differ for tune (autocast API, fused attention, c10d names).
// `#if TORCH_VERSION_*` appears nowhere else in the project.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

// True when the LibTorch being compiled against is at least major.minor (a plain `MINOR >= m` test breaks at 3.0).
#define TUNE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace tune::compat {

inline bool autocast_cpu_enabled() {
#if TUNE_TORCH_AT_LEAST(2, 4)  // at::autocast::*(DeviceType) since 2.4; older names deprecated there
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}
inline void set_autocast_cpu_enabled(bool enabled) {
#if TUNE_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
#else
  at::autocast::set_cpu_enabled(enabled);
#endif
}
inline at::ScalarType autocast_cpu_dtype() {
#if TUNE_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(at::kCPU);
#else
  return at::autocast::get_autocast_cpu_dtype();
#endif
}
inline void set_autocast_cpu_dtype(at::ScalarType dtype) {
#if TUNE_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
  at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}
inline bool autocast_cuda_enabled() {
#if TUNE_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}
inline void set_autocast_cuda_enabled(bool enabled) {
#if TUNE_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
#else
  at::autocast::set_enabled(enabled);
#endif
}
inline at::ScalarType autocast_cuda_dtype() {
#if TUNE_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(at::kCUDA);
#else
  return at::autocast::get_autocast_gpu_dtype();
#endif
}
inline void set_autocast_cuda_dtype(at::ScalarType dtype) {
#if TUNE_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

// CPU autocast to fp16: LibTorch 1.13 autocasts CPU ops to bf16 only; fp16 on CPU arrived in the 2.x series
// (pytorch#112484), taken here as available from 2.4.
inline constexpr bool cpu_autocast_supports_fp16() { return TUNE_TORCH_AT_LEAST(2, 4); }

}  // namespace tune::compat

// The parameters of at::impl::MetaBase::set_output_raw_strided, which a structured kernel's caller overrides
// (precision/cpu_gemm.cpp): LibTorch 2.11 (the GPU machines' build) still passes the output's DimnameList; 2.13
// and 2.14 do not. 2.12 is unverified and taken to be like 2.13.
#if TUNE_TORCH_AT_LEAST(2, 12)
#define TUNE_SET_OUTPUT_RAW_STRIDED_PARAMS(sizes, strides, options) \
  int64_t, at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options
#else
#define TUNE_SET_OUTPUT_RAW_STRIDED_PARAMS(sizes, strides, options) \
  int64_t, at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options, at::DimnameList
#endif

// LibTorch's fused RMSNorm (one CUDA kernel forward, one backward; autograd node FusedRmsNormBackward0), present
// from the 2.8 series on. Absent: nullopt, and the caller computes the norm op by op.
#if __has_include(<ATen/ops/_fused_rms_norm.h>)
#include <ATen/ops/_fused_rms_norm.h>
#define TUNE_HAS_FUSED_RMS_NORM 1
#else
#define TUNE_HAS_FUSED_RMS_NORM 0
#endif
#include <optional>

namespace tune::compat {

inline std::optional<at::Tensor> fused_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
#if TUNE_HAS_FUSED_RMS_NORM
  return std::get<0>(at::_fused_rms_norm(input, {input.size(-1)}, weight, eps));
#else
  (void)input, (void)weight, (void)eps;
  return std::nullopt;
#endif
}

}  // namespace tune::compat
