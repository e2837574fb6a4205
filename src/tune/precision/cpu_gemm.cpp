// bf16/fp16 matrix products through fp32 kernels on CPUs without native low-precision GEMM (see cpu_gemm.h).
#include "tune/precision/cpu_gemm.h"

#include "tune/compat/torch_compat.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/addmm_native.h>
#include <ATen/ops/baddbmm_native.h>
#include <ATen/ops/bmm_native.h>
#include <ATen/ops/mm_native.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <vector>
#include <cstdlib>

namespace tune::precision {

namespace {

std::atomic<int64_t> fp32_accumulate_calls{0};


// True when every operand (and the out= tensor, if any) is of one low-precision dtype whose products this CPU
// should compute through fp32. Mixed dtypes go to LibTorch's kernel, which reports them as it always does.
bool through_fp32(std::initializer_list<const at::Tensor*> operands) {
  const c10::ScalarType dtype = (*operands.begin())->scalar_type();
  for (const at::Tensor* t : operands) {
    if (t->defined() && t->scalar_type() != dtype) return false;
  }
  return cpu_gemm_mode_for(dtype) == CpuGemmMode::fp32_accumulate;
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
  void set_output_raw_strided(TUNE_SET_OUTPUT_RAW_STRIDED_PARAMS(sizes, strides, options)) override {
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

// MKL's mixed-precision GEMM (cblas_gemm_bf16bf16f32 / cblas_gemm_f16f16f32: low-precision operands, fp32
// accumulation and result), which LibTorch's wheel links in and exports. It reads the operands where they are;
// used only for matrix products whose right operand is too large to convert (see kMaxConvertedBytes).
using MklMixedGemm = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const void* a,
                              int lda, const void* b, int ldb, float beta, float* c, int ldc);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

MklMixedGemm mkl_gemm_for(c10::ScalarType dtype) {
  static const auto bf16 = reinterpret_cast<MklMixedGemm>(dlsym(RTLD_DEFAULT, "cblas_gemm_bf16bf16f32"));
  static const auto fp16 = reinterpret_cast<MklMixedGemm>(dlsym(RTLD_DEFAULT, "cblas_gemm_f16f16f32"));
  return dtype == c10::kBFloat16 ? bf16 : fp16;
}

// A 2-D operand as cblas sees it in row-major order: as stored (rows contiguous) or transposed (columns
// contiguous), with its leading dimension. Operands with neither layout are copied contiguous first.
struct CblasOperand {
  at::Tensor tensor;
  int transpose;
  int64_t leading;
};
CblasOperand cblas_operand(const at::Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (t.stride(1) == 1 || cols == 1) {
    const int64_t leading = rows == 1 ? cols : t.stride(0);
    if (leading >= std::max<int64_t>(cols, 1)) return {t, kCblasNoTrans, leading};
  }
  if (t.stride(0) == 1 || rows == 1) {
    const int64_t leading = cols == 1 ? rows : t.stride(1);
    if (leading >= std::max<int64_t>(rows, 1)) return {t, kCblasTrans, leading};
  }
  return {t.contiguous(), kCblasNoTrans, cols};
}

bool fits_cblas_int(std::initializer_list<int64_t> values) {
  for (const int64_t v : values) {
    if (v <= 0 || v > std::numeric_limits<int>::max()) return false;
  }
  return true;
}

// result = alpha * a @ b + beta * result for 2-D low-precision a [m, k], b [k, n] and a contiguous fp32 result
// [m, n] (not read when beta is 0), with b converted to fp32 once by the caller (`b32`), or undefined when it is
// too large to convert: MKL's mixed-precision GEMM then reads b in place.
//
// Why convert: the operands are exact in fp32, and LibTorch's fp32 kernel (MKL's sgemm) is the fastest product
// on the CPUs measured. On this project's Xeon (AVX512-BF16, no AMX), one thread, [4096, 384] x [384, 1152] and
// the other Latte/Llama projection shapes: converting slices + sgemm 131-149 GFLOP/s, LibTorch's own bf16 GEMM
// (oneDNN) 79-85, MKL's mixed GEMM 84-86 (scripts/bench_cpu_gemm.py). On AVX2-only CPUs the mixed GEMM and sgemm
// were within 4% of each other.
void accumulate_product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b32, float alpha, float beta,
                        at::Tensor& result) {
  if (b32.defined()) {
    native_addmm(result, a.to(at::kFloat), b32, beta, alpha, result);
    return;
  }
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const MklMixedGemm gemm = mkl_gemm_for(a.scalar_type());
  if (gemm != nullptr && fits_cblas_int({m, n, k})) {
    const CblasOperand lhs = cblas_operand(a), rhs = cblas_operand(b);
    if (fits_cblas_int({lhs.leading, rhs.leading})) {
      gemm(kCblasRowMajor, lhs.transpose, rhs.transpose, static_cast<int>(m), static_cast<int>(n),
           static_cast<int>(k), alpha, lhs.tensor.const_data_ptr(), static_cast<int>(lhs.leading),
           rhs.tensor.const_data_ptr(), static_cast<int>(rhs.leading), beta, result.mutable_data_ptr<float>(),
           static_cast<int>(n));
      return;
    }
  }
  // No MKL, or sizes outside its 32-bit interface (k = 0 among them): LibTorch's fp32 kernel on converted copies.
  native_addmm(result, a.to(at::kFloat), b.to(at::kFloat), beta, alpha, result);
}

// The checks LibTorch's own kernels make, with their messages, before the fast path touches memory.
void check_matrices(const at::Tensor& a, const at::Tensor& b, int64_t dims) {
  TORCH_CHECK(a.dim() == dims, dims == 2 ? "self must be a matrix" : "batch1 must be a 3D tensor");
  TORCH_CHECK(b.dim() == dims, dims == 2 ? "mat2 must be a matrix" : "batch2 must be a 3D tensor");
  TORCH_CHECK(a.size(-1) == b.size(-2), "mat1 and mat2 shapes cannot be multiplied (", a.size(-2), "x", a.size(-1),
              " and ", b.size(-2), "x", b.size(-1), ")");
  if (dims == 3) TORCH_CHECK(a.size(0) == b.size(0), "batch1 and batch2 must have same number of batches");
}

// The fp32 transients are slices, so a checkpointed block's backward adds little to the peak: the result (and the
// left operand) converted a block of rows (or of matrices) at a time, at most kBlockElements fp32 elements of
// result per block (256 KiB), with the right operand of a matrix product converted whole (a weight); or, when that
// is smaller (a weight gradient, whose right operand is the layer's input), the result whole (weight-sized) with
// both operands converted kInnerSlab steps of the inner dimension at a time. Over kMaxConvertedBytes, or with
// fewer than kMinRowsToConvert rows, MKL's mixed GEMM reads the operands in place.
constexpr int64_t kBlockElements = int64_t{1} << 16;
constexpr int64_t kMaxConvertedBytes = int64_t{64} << 20;
constexpr int64_t kMinRowsToConvert = 64;
constexpr int64_t kInnerSlab = 256;

int64_t rows_per_chunk(int64_t columns) { return std::max<int64_t>(64, kBlockElements / std::max<int64_t>(columns, 1)); }

// beta * bias + alpha * a @ b (bias undefined: the plain product) for matrices, accumulated in fp32 and rounded
// once to the operands' dtype into `result`.
void matrix_product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias, double beta, double alpha,
                    at::Tensor& result) {
  const int64_t rows = a.size(0), inner = a.size(1), columns = b.size(1);
  const int64_t chunk = std::min(rows, rows_per_chunk(columns));
  // fp32 elements alive at once: b whole plus a block of a's rows and the result's, or (in slabs of the inner
  // dimension) the result whole plus a slab of each operand. A weight gradient (inner = tokens) takes the second
  // form: b is then the layer's input, and an fp32 copy of it would be an activation-sized transient.
  const int64_t whole_b = inner * columns + chunk * (inner + columns);
  const int64_t in_slabs = rows * columns + kInnerSlab * (rows + columns);
  if (b.numel() > 0 && in_slabs < whole_b && in_slabs * 4 <= kMaxConvertedBytes) {
    at::Tensor sum = at::empty({rows, columns}, a.options().dtype(at::kFloat));
    if (bias.defined()) sum.copy_(bias);
    for (int64_t first = 0; first < inner; first += kInnerSlab) {
      const int64_t count = std::min(kInnerSlab, inner - first);
      const double keep = first > 0 ? 1.0 : (bias.defined() ? beta : 0.0);
      native_addmm(sum, a.narrow(1, first, count).to(at::kFloat), b.narrow(0, first, count).to(at::kFloat), keep,
                   alpha, sum);
    }
    result.copy_(sum);
    return;
  }
  // Converting b costs about as much as multiplying it by 64 rows: fewer rows (a decode step, a short sequence
  // through a large head) read it in place.
  const bool convert = rows >= kMinRowsToConvert && b.numel() > 0 && whole_b * 4 <= kMaxConvertedBytes;
  const at::Tensor b32 = convert ? b.to(at::kFloat) : at::Tensor();
  at::Tensor buffer = at::empty({std::max<int64_t>(chunk, 1), columns}, a.options().dtype(at::kFloat));
  for (int64_t row = 0; row < rows; row += chunk) {
    const int64_t count = std::min(chunk, rows - row);
    at::Tensor partial = buffer.narrow(0, 0, count);
    if (bias.defined()) partial.copy_(bias.narrow(0, row, count));
    accumulate_product(a.narrow(0, row, count), b, b32, static_cast<float>(alpha),
                       bias.defined() ? static_cast<float>(beta) : 0.0f, partial);
    result.narrow(0, row, count).copy_(partial);
  }
}

// The same for batches: a group of whole matrices converted at a time and multiplied by LibTorch's fp32 batched
// kernel (per-matrix calls cost more than the product for attention's small matrices: 8 x 64 x 8 per head in
// a temporal block ran at 1 GFLOP/s through MKL's mixed GEMM one matrix at a time).
void batched_product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias, double beta, double alpha,
                     at::Tensor& result) {
  const int64_t matrices = a.size(0), per_matrix = a.size(1) * b.size(2);
  const int64_t group = std::clamp<int64_t>(kBlockElements / std::max<int64_t>(per_matrix, 1), 1,
                                            std::max<int64_t>(matrices, 1));
  for (int64_t first = 0; first < matrices; first += group) {
    const int64_t count = std::min(group, matrices - first);
    at::Tensor partial = at::empty({count, a.size(1), b.size(2)}, a.options().dtype(at::kFloat));
    if (bias.defined()) partial.copy_(bias.narrow(0, first, count));
    native_baddbmm(partial, a.narrow(0, first, count).to(at::kFloat), b.narrow(0, first, count).to(at::kFloat),
                   bias.defined() ? beta : 0.0, alpha, partial);
    result.narrow(0, first, count).copy_(partial);
  }
}

// beta * bias + alpha * a @ b (bias undefined: the plain product) for matrices or batches of them, accumulated in
// fp32 and rounded once to the operands' dtype, into `out` for the out= forms (resized) or a new tensor.
at::Tensor low_precision_product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias, double beta,
                                 double alpha, at::Tensor* out, bool count = true) {
  if (count) ++fp32_accumulate_calls;  // not the kernel choice's timing runs: the count shows the run's products
  const bool batched = a.dim() == 3;
  check_matrices(a, b, batched ? 3 : 2);
  std::vector<int64_t> sizes{a.size(-2), b.size(-1)};
  if (batched) sizes.insert(sizes.begin(), a.size(0));
  at::Tensor result = out != nullptr ? *out : at::empty(sizes, a.options());
  if (out != nullptr) at::native::resize_output(result, sizes);
  const bool with_bias = bias.defined() && beta != 0.0;  // beta 0 ignores the bias, NaNs included, as LibTorch
  const at::Tensor expanded_bias = with_bias ? bias.expand(sizes) : at::Tensor();
  if (batched) batched_product(a, b, expanded_bias, beta, alpha, result);
  else matrix_product(a, b, expanded_bias, beta, alpha, result);
  return result;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  if (!through_fp32({&self, &mat2})) return native_mm(self, mat2);
  return low_precision_product(self, mat2, {}, 0.0, 1.0, nullptr);
}
at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (!through_fp32({&self, &mat2, &out})) native_mm(self, mat2, out);
  else low_precision_product(self, mat2, {}, 0.0, 1.0, &out);
  return out;
}
at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  if (!through_fp32({&self, &mat2})) return native_bmm(self, mat2);
  return low_precision_product(self, mat2, {}, 0.0, 1.0, nullptr);
}
at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (!through_fp32({&self, &mat2, &out})) native_bmm(self, mat2, out);
  else low_precision_product(self, mat2, {}, 0.0, 1.0, &out);
  return out;
}
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  if (!through_fp32({&mat1, &mat2, &self})) return native_addmm(self, mat1, mat2, beta, alpha);
  return low_precision_product(mat1, mat2, self, beta.toDouble(), alpha.toDouble(), nullptr);
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out) {
  if (!through_fp32({&mat1, &mat2, &self, &out})) native_addmm(self, mat1, mat2, beta, alpha, out);
  else low_precision_product(mat1, mat2, self, beta.toDouble(), alpha.toDouble(), &out);
  return out;
}
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  if (!through_fp32({&batch1, &batch2, &self})) return native_baddbmm(self, batch1, batch2, beta, alpha);
  return low_precision_product(batch1, batch2, self, beta.toDouble(), alpha.toDouble(), nullptr);
}
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (!through_fp32({&batch1, &batch2, &self, &out})) native_baddbmm(self, batch1, batch2, beta, alpha, out);
  else low_precision_product(batch1, batch2, self, beta.toDouble(), alpha.toDouble(), &out);
  return out;
}

// Registering a kernel where LibTorch has one makes the dispatcher warn that it overrides it, once per operator:
// that is the intent here, so the warnings are dropped while registering.
class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

void install_cpu_gemm() {
  // Registered the first time a mode is fp32_accumulate (the measured choice may come after an earlier call found
  // both native), and then for the process: with both modes native again the replacements hand every product to
  // LibTorch's kernels (through_fp32).
  if (cpu_gemm_mode_for_bf16() == CpuGemmMode::native && cpu_gemm_mode_for_fp16() == CpuGemmMode::native) return;
  static std::once_flag installed;
  std::call_once(installed, [] {
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    // Lives for the process: the registrations are undone when the Library object is destroyed. Held by a static
    // pointer, so LeakSanitizer sees it reachable rather than leaked.
    static torch::Library* library =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    library->impl("mm", TORCH_FN(mm));
    library->impl("mm.out", TORCH_FN(mm_out));
    library->impl("bmm", TORCH_FN(bmm));
    library->impl("bmm.out", TORCH_FN(bmm_out));
    library->impl("addmm", TORCH_FN(addmm));
    library->impl("addmm.out", TORCH_FN(addmm_out));
    library->impl("baddbmm", TORCH_FN(baddbmm));
    library->impl("baddbmm.out", TORCH_FN(baddbmm_out));
  });
}

at::Tensor libtorch_mm(const at::Tensor& a, const at::Tensor& b) { return native_mm(a, b); }

at::Tensor fp32_accumulate_mm(const at::Tensor& a, const at::Tensor& b) {
  return low_precision_product(a, b, {}, 0.0, 1.0, nullptr, /*count=*/false);
}

int64_t cpu_gemm_fp32_accumulate_calls() { return fp32_accumulate_calls.load(); }

std::string describe_cpu_gemm() {
  auto name = [](CpuGemmMode mode) { return mode == CpuGemmMode::native ? "LibTorch's" : "fp32-accumulate"; };
  return fmt::format("CPU matmuls: bf16 through {} kernels, fp16 through {} kernels{}",
                     name(cpu_gemm_mode_for_bf16()), name(cpu_gemm_mode_for_fp16()),
                     cpu_gemm_mode_forced() ? " (TUNE_CPU_GEMM)" : "");
}

}  // namespace tune::precision
