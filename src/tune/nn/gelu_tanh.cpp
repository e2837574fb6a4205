// The tanh GELU: tune's vectorised bf16 CPU kernel and LibTorch's gelu elsewhere.
#include "tune/nn/gelu_tanh.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tune::nn {
namespace {

constexpr const char* kApproximate = "tanh";

// The loops below are written for GCC's and Clang's auto-vectoriser: no calls, no branches (selects instead),
// restrict-qualified pointers. target_clones builds them once per instruction set and picks the widest this CPU
// has when the library loads (AVX-512: 16 floats a vector), as LibTorch's own kernels dispatch by CPU capability.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TUNE_VECTOR_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#endif
#endif
#ifndef TUNE_VECTOR_CLONES
#define TUNE_VECTOR_CLONES
#endif

inline float bf16_to_float(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

// Round to nearest even, as c10::BFloat16's conversion does; a NaN stays a (quiet) NaN.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

// exp(z) for z in [-87, 87] (callers clamp), to about 2 fp32 ulps: z = n ln2 + r with |r| <= ln2 / 2 (ln2 split in
// two so that n ln2 is exact), e^r by its degree-7 Taylor polynomial (truncation error below 5e-9 relative), and 2^n
// put into the exponent bits.
inline float exp_clamped(float z) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // exactly representable with few mantissa bits
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (z * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (z - n * kLn2High) - n * kLn2Low;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const uint32_t exponent = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return p * scale;
}

constexpr float kSqrt2OverPi = 0.797884560802865355f;
constexpr float kCubic = 0.044715f;

// sigmoid(2u) = 0.5 (1 + tanh(u)) for u = sqrt(2/pi)(x + 0.044715 x^3). Below e^-87 (x < -9.9) it is taken as 0:
// fp32's normal range ends there, and GELU's value x * sigmoid(2u) is below 1e-36 (LibTorch's form gives 0 from
// x = -5.6 on, where 1 + tanh(u) cancels).
inline float half_one_plus_tanh(float x) {
  const float u = kSqrt2OverPi * x * (1.0f + kCubic * x * x);
  const float z = -2.0f * u;
  const float s = 1.0f / (1.0f + exp_clamped(std::min(std::max(z, -87.0f), 87.0f)));
  return z > 87.0f ? 0.0f : s;
}

TUNE_VECTOR_CLONES void gelu_forward_bf16(const uint16_t* __restrict x, uint16_t* __restrict out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float value = bf16_to_float(x[i]);
    out[i] = float_to_bf16(value * half_one_plus_tanh(value));
  }
}

// d/dx [x s] = s + x s (1 - s) 2 u'(x), s = sigmoid(2u), u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2): LibTorch's
// 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t = tanh(u), since 0.5 (1 - t^2) = 2 s (1 - s).
TUNE_VECTOR_CLONES void gelu_backward_bf16(const uint16_t* __restrict grad, const uint16_t* __restrict x,
                                           uint16_t* __restrict out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float value = bf16_to_float(x[i]);
    const float s = half_one_plus_tanh(value);
    const float slope = kSqrt2OverPi * (1.0f + 3.0f * kCubic * value * value);
    const float spread = s * (1.0f - s);  // 0 in both tails, where x * spread would be inf * 0 at x = +-inf
    const float derivative = spread == 0.0f ? s : s + 2.0f * value * spread * slope;
    out[i] = float_to_bf16(bf16_to_float(grad[i]) * derivative);
  }
}

// Elements per parallel task: large enough that a task's time dwarfs the scheduling.
constexpr int64_t kGrain = 1 << 15;

const uint16_t* bits_of(const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.const_data_ptr()); }
uint16_t* bits_of(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.mutable_data_ptr()); }

bool libtorch_forced() {
  static const bool forced = [] {
    const char* value = std::getenv("TUNE_CPU_GELU");
    return value != nullptr && std::string_view(value) == "libtorch";
  }();
  return forced;
}

struct GeluTanh : public torch::autograd::Function<GeluTanh> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return gelu_tanh(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    return {gelu_tanh_backward(grad_outputs[0], ctx->get_saved_variables()[0])};
  }
};

}  // namespace

bool gelu_tanh_uses_tune_kernel(const torch::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == torch::kBFloat16 && x.is_contiguous() && !libtorch_forced();
}

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  if (!gelu_tanh_uses_tune_kernel(x)) {
    torch::NoGradGuard no_grad;  // the value only, as on tune's path
    return torch::gelu(x, kApproximate);
  }
  torch::Tensor out = torch::empty_like(x, torch::MemoryFormat::Contiguous);
  const uint16_t* in = bits_of(x);
  uint16_t* result = bits_of(out);
  at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    gelu_forward_bf16(in + begin, result + begin, end - begin);
  });
  return out;
}

torch::Tensor gelu_tanh_backward(const torch::Tensor& grad, const torch::Tensor& x) {
  if (!gelu_tanh_uses_tune_kernel(x) || grad.scalar_type() != x.scalar_type() || !grad.is_contiguous() ||
      grad.sizes() != x.sizes()) {
    torch::NoGradGuard no_grad;
    return torch::gelu_backward(grad, x, kApproximate);
  }
  torch::Tensor out = torch::empty_like(x, torch::MemoryFormat::Contiguous);
  const uint16_t* g = bits_of(grad);
  const uint16_t* in = bits_of(x);
  uint16_t* result = bits_of(out);
  at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    gelu_backward_bf16(g + begin, in + begin, result + begin, end - begin);
  });
  return out;
}

torch::Tensor gelu_tanh_differentiable(const torch::Tensor& x) {
  // LibTorch's own op where its kernel runs anyway: its autograd node supports double backward.
  if (!gelu_tanh_uses_tune_kernel(x)) return torch::gelu(x, kApproximate);
  return GeluTanh::apply(x);
}

}  // namespace tune::nn
