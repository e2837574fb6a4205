// The tanh GELU: tune's vectorised bf16 CPU kernel and LibTorch's gelu elsewhere.
#include "tune/nn/gelu_tanh.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tune/core/parallel.h"
#include "tune/nn/cpu_vector_math.h"

namespace tune::nn {
namespace {

constexpr const char* kApproximate = "tanh";

using cpu_vector::bf16_to_float;
using cpu_vector::exp_clamped;
using cpu_vector::float_to_bf16;

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
// d gelu / dx at a bf16 input.
inline float gelu_derivative(uint16_t x_bits) {
  const float value = bf16_to_float(x_bits);
  const float s = half_one_plus_tanh(value);
  const float slope = kSqrt2OverPi * (1.0f + 3.0f * kCubic * value * value);
  const float spread = s * (1.0f - s);  // 0 in both tails, where x * spread would be inf * 0 at x = +-inf
  return spread == 0.0f ? s : s + 2.0f * value * spread * slope;
}

TUNE_VECTOR_CLONES void gelu_backward_bf16(const uint16_t* __restrict grad, const uint16_t* __restrict x,
                                           uint16_t* __restrict out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = float_to_bf16(bf16_to_float(grad[i]) * gelu_derivative(x[i]));
}

// The same written over the gradient (one pointer, so no aliasing for the vectoriser to guard against).
TUNE_VECTOR_CLONES void gelu_backward_bf16_in_place(uint16_t* grad, const uint16_t* __restrict x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) grad[i] = float_to_bf16(bf16_to_float(grad[i]) * gelu_derivative(x[i]));
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
  tune::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    gelu_forward_bf16(in + begin, result + begin, end - begin);
  });
  return out;
}

namespace {

torch::Tensor gelu_tanh_backward_into(const torch::Tensor& grad, const torch::Tensor& x, bool overwrite) {
  if (!gelu_tanh_uses_tune_kernel(x) || grad.scalar_type() != x.scalar_type() || !grad.is_contiguous() ||
      grad.sizes() != x.sizes()) {
    torch::NoGradGuard no_grad;
    return torch::gelu_backward(grad, x, kApproximate);
  }
  const uint16_t* in = bits_of(x);
  if (overwrite) {
    torch::Tensor out = grad;
    uint16_t* g = bits_of(out);
    tune::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      gelu_backward_bf16_in_place(g + begin, in + begin, end - begin);
    });
    return out;
  }
  torch::Tensor out = torch::empty_like(x, torch::MemoryFormat::Contiguous);
  const uint16_t* g = bits_of(grad);
  uint16_t* result = bits_of(out);
  tune::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    gelu_backward_bf16(g + begin, in + begin, result + begin, end - begin);
  });
  return out;
}

}  // namespace

torch::Tensor gelu_tanh_backward(const torch::Tensor& grad, const torch::Tensor& x) {
  return gelu_tanh_backward_into(grad, x, /*overwrite=*/false);
}

torch::Tensor gelu_tanh_backward_(const torch::Tensor& grad, const torch::Tensor& x) {
  return gelu_tanh_backward_into(grad, x, /*overwrite=*/true);
}

torch::Tensor gelu_tanh_differentiable(const torch::Tensor& x) {
  // LibTorch's own op where its kernel runs anyway: its autograd node supports double backward.
  if (!gelu_tanh_uses_tune_kernel(x)) return torch::gelu(x, kApproximate);
  return GeluTanh::apply(x);
}

}  // namespace tune::nn
