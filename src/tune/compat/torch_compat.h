// The one place where LibTorch 1.13 and 2.x differ for tune (autocast API, fused attention, c10d names).
// `#if TORCH_VERSION_*` appears nowhere else in the project.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace tune::compat {

inline bool autocast_cpu_enabled() {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}
inline void set_autocast_cpu_enabled(bool enabled) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
#else
  at::autocast::set_cpu_enabled(enabled);
#endif
}
inline at::ScalarType autocast_cpu_dtype() {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  return at::autocast::get_autocast_dtype(at::kCPU);
#else
  return at::autocast::get_autocast_cpu_dtype();
#endif
}
inline void set_autocast_cpu_dtype(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
  at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}
inline bool autocast_cuda_enabled() {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}
inline void set_autocast_cuda_enabled(bool enabled) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
#else
  at::autocast::set_enabled(enabled);
#endif
}
inline at::ScalarType autocast_cuda_dtype() {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  return at::autocast::get_autocast_dtype(at::kCUDA);
#else
  return at::autocast::get_autocast_gpu_dtype();
#endif
}
inline void set_autocast_cuda_dtype(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

}  // namespace tune::compat
