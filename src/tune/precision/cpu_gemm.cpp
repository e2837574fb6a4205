// bf16/fp16 matrix products through fp32 kernels on CPUs without native low-precision GEMM (see cpu_gemm.h).
#include "tune/precision/cpu_gemm.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/addmm_native.h>
#include <ATen/ops/baddbmm_native.h>
#include <ATen/ops/bmm_native.h>
#include <ATen/ops/mm_native.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace tune::precision {

namespace {

std::atomic<int64_t> fp32_accumulate_calls{0};

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
bool cpu_has_native_fp16_gemm() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512fp16");
#else
  return true;
#endif
}

CpuGemmMode mode_for(c10::ScalarType dtype) {
  if (dtype == c10::kBFloat16) return cpu_gemm_mode_for_bf16();
  if (dtype == c10::kHalf) return cpu_gemm_mode_for_fp16();
  return CpuGemmMode::native;
}

// True when every operand (and the out= tensor, if any) is of one low-precision dtype whose products this CPU
// should compute through fp32. Mixed dtypes go to LibTorch's kernel, which reports them as it always does.
bool through_fp32(std::initializer_list<const at::Tensor*> operands) {
  const c10::ScalarType dtype = (*operands.begin())->scalar_type();
  for (const at::Tensor* t : operands) {
    if (t->defined() && t->scalar_type() != dtype) return false;
  }
  return mode_for(dtype) == CpuGemmMode::fp32_accumulate;
}

// Runs one of LibTorch's structured CPU kernels (meta() checks shapes and dtypes and sizes the output, impl()
// computes) into `out`, allocating it when undefined (functional form) or resizing it (out= form), as the
// generated wrappers do. Calling the kernel class directly, not the operator, is what lets the replacement
// kernels below hand fp32 and every other dtype to LibTorch's code: the operator now dispatches to them.
template <class Kernel>
class StructuredCall final : public Kernel {
 public:
  explicit StructuredCall(at::Tensor out) : out_(std::move(out)) {}
  const at::Tensor& maybe_get_output(int64_t) override { return out_; }
  void set_output_raw_strided(int64_t, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    if (!out_.defined()) {
      out_ = strides.empty() ? at::empty(sizes, options) : at::empty_strided(sizes, strides, options);
      return;
    }
    TORCH_CHECK(out_.scalar_type() == options.dtype().toScalarType(), "Expected out tensor to have dtype ",
                options.dtype(), ", but got ", out_.scalar_type(), " instead");
    at::native::resize_output(out_, sizes);
  }
  at::Tensor& out() { return out_; }

 private:
  at::Tensor out_;
};

at::Tensor native_mm(const at::Tensor& self, const at::Tensor& mat2, at::Tensor out = {}) {
  StructuredCall<at::native::structured_mm_out_cpu> call(std::move(out));
  call.meta(self, mat2);
  call.impl(self, mat2, call.out());
  return call.out();
}
at::Tensor native_bmm(const at::Tensor& self, const at::Tensor& mat2, at::Tensor out = {}) {
  StructuredCall<at::native::structured_bmm_out_cpu> call(std::move(out));
  call.meta(self, mat2);
  call.impl(self, mat2, call.out());
  return call.out();
}
at::Tensor native_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor out = {}) {
  StructuredCall<at::native::structured_addmm_out_cpu> call(std::move(out));
  call.meta(self, mat1, mat2, beta, alpha);
  call.impl(self, mat1, mat2, beta, alpha, call.out());
  return call.out();
}
at::Tensor native_baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                          const at::Scalar& beta, const at::Scalar& alpha, at::Tensor out = {}) {
  StructuredCall<at::native::structured_baddbmm_out_cpu> call(std::move(out));
  call.meta(self, batch1, batch2, beta, alpha);
  call.impl(self, batch1, batch2, beta, alpha, call.out());
  return call.out();
}

at::Tensor fp32(const at::Tensor& t) { return t.to(at::kFloat); }

// The fp32 result rounded to the operands' dtype; written into `out` for the out= forms.
at::Tensor rounded(const at::Tensor& result, c10::ScalarType dtype, at::Tensor* out) {
  ++fp32_accumulate_calls;
  if (out == nullptr) return result.to(dtype);
  at::native::resize_output(*out, result.sizes());
  out->copy_(result);
  return *out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  if (!through_fp32({&self, &mat2})) return native_mm(self, mat2);
  return rounded(native_mm(fp32(self), fp32(mat2)), self.scalar_type(), nullptr);
}
at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (!through_fp32({&self, &mat2, &out})) native_mm(self, mat2, out);
  else rounded(native_mm(fp32(self), fp32(mat2)), self.scalar_type(), &out);
  return out;
}
at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  if (!through_fp32({&self, &mat2})) return native_bmm(self, mat2);
  return rounded(native_bmm(fp32(self), fp32(mat2)), self.scalar_type(), nullptr);
}
at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (!through_fp32({&self, &mat2, &out})) native_bmm(self, mat2, out);
  else rounded(native_bmm(fp32(self), fp32(mat2)), self.scalar_type(), &out);
  return out;
}
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  if (!through_fp32({&mat1, &mat2, &self})) return native_addmm(self, mat1, mat2, beta, alpha);
  return rounded(native_addmm(fp32(self), fp32(mat1), fp32(mat2), beta, alpha), mat1.scalar_type(), nullptr);
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out) {
  if (!through_fp32({&mat1, &mat2, &self, &out})) native_addmm(self, mat1, mat2, beta, alpha, out);
  else rounded(native_addmm(fp32(self), fp32(mat1), fp32(mat2), beta, alpha), mat1.scalar_type(), &out);
  return out;
}
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  if (!through_fp32({&batch1, &batch2, &self})) return native_baddbmm(self, batch1, batch2, beta, alpha);
  return rounded(native_baddbmm(fp32(self), fp32(batch1), fp32(batch2), beta, alpha), batch1.scalar_type(),
                 nullptr);
}
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (!through_fp32({&batch1, &batch2, &self, &out})) native_baddbmm(self, batch1, batch2, beta, alpha, out);
  else rounded(native_baddbmm(fp32(self), fp32(batch1), fp32(batch2), beta, alpha), batch1.scalar_type(), &out);
  return out;
}

// Registering a kernel where LibTorch has one makes the dispatcher warn that it overrides it, once per operator:
// that is the intent here, so the warnings are dropped while registering.
class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

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

void install_cpu_gemm() {
  static const bool installed = [] {
    if (cpu_gemm_mode_for_bf16() == CpuGemmMode::native && cpu_gemm_mode_for_fp16() == CpuGemmMode::native) {
      return false;
    }
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    // Lives for the process: the registrations are undone when the Library object is destroyed.
    auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    library->impl("mm", TORCH_FN(mm));
    library->impl("mm.out", TORCH_FN(mm_out));
    library->impl("bmm", TORCH_FN(bmm));
    library->impl("bmm.out", TORCH_FN(bmm_out));
    library->impl("addmm", TORCH_FN(addmm));
    library->impl("addmm.out", TORCH_FN(addmm_out));
    library->impl("baddbmm", TORCH_FN(baddbmm));
    library->impl("baddbmm.out", TORCH_FN(baddbmm_out));
    return true;
  }();
  (void)installed;
}

int64_t cpu_gemm_fp32_accumulate_calls() { return fp32_accumulate_calls.load(); }

std::string describe_cpu_gemm() {
  auto name = [](CpuGemmMode mode) { return mode == CpuGemmMode::native ? "LibTorch's" : "fp32-accumulate"; };
  return fmt::format("CPU matmuls: bf16 through {} kernels, fp16 through {} kernels{}",
                     name(cpu_gemm_mode_for_bf16()), name(cpu_gemm_mode_for_fp16()),
                     std::getenv("TUNE_CPU_GEMM") != nullptr ? " (TUNE_CPU_GEMM)" : "");
}

}  // namespace tune::precision
