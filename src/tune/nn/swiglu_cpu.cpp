// The SwiGLU product's CPU kernels (header comment).
#include "tune/nn/swiglu_cpu.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tune/core/parallel.h"
#include "tune/nn/cpu_vector_math.h"

namespace tune::nn {
namespace {

using cpu_vector::bf16_to_float;
using cpu_vector::float_to_bf16;

// Elements per task: enough that a task's time dwarfs the scheduling.
constexpr int64_t kGrain = int64_t{1} << 15;

// 1 + exp(-x), exp_clamped taking [-87, 87]: beyond it silu is 0 or x, and the sigmoid 0 or 1, to fp32 precision.
inline float one_plus_exp_minus(float x) {
  return 1.0f + cpu_vector::exp_clamped(std::min(87.0f, std::max(-87.0f, -x)));
}

inline float round_to_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

TUNE_VECTOR_CLONES void swiglu_forward(const uint16_t* __restrict gate, const uint16_t* __restrict up,
                                       uint16_t* __restrict out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = bf16_to_float(gate[i]);
    const float silu = round_to_bf16(g / one_plus_exp_minus(g));  // LibTorch's form of silu
    out[i] = float_to_bf16(silu * bf16_to_float(up[i]));
  }
}

TUNE_VECTOR_CLONES void swiglu_backward(const uint16_t* __restrict grad, const uint16_t* __restrict gate,
                                        const uint16_t* __restrict up, uint16_t* __restrict grad_gate,
                                        uint16_t* __restrict grad_up, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float dp = bf16_to_float(grad[i]);
    const float g = bf16_to_float(gate[i]);
    const float denominator = one_plus_exp_minus(g);
    const float s = 1.0f / denominator;
    const float silu = round_to_bf16(g / denominator);
    grad_up[i] = float_to_bf16(dp * silu);
    const float grad_silu = round_to_bf16(dp * bf16_to_float(up[i]));
    grad_gate[i] = float_to_bf16(grad_silu * s * (1.0f + g * (1.0f - s)));
  }
}

const uint16_t* bits_of(const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.const_data_ptr()); }
uint16_t* bits_of(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.mutable_data_ptr()); }

struct CpuSwiglu : public torch::autograd::Function<CpuSwiglu> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    torch::Tensor out = torch::empty(gate.sizes(), gate.options());
    const uint16_t* g = bits_of(gate);
    const uint16_t* u = bits_of(up);
    uint16_t* o = bits_of(out);
    tune::parallel_for(0, gate.numel(), kGrain, [&](int64_t begin, int64_t end) {
      swiglu_forward(g + begin, u + begin, o + begin, end - begin);
    });
    ctx->save_for_backward({gate, up});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& gate = saved[0];
    const torch::Tensor& up = saved[1];
    const torch::Tensor grad = grad_outputs[0].to(torch::kBFloat16).contiguous();
    // Both made in one pass even where one is not wanted (a frozen gate_proj still passes its input's gradient on).
    torch::Tensor grad_gate = torch::empty(gate.sizes(), gate.options());
    torch::Tensor grad_up = torch::empty(up.sizes(), up.options());
    const uint16_t* dp = bits_of(grad);
    const uint16_t* g = bits_of(gate);
    const uint16_t* u = bits_of(up);
    uint16_t* dg = bits_of(grad_gate);
    uint16_t* du = bits_of(grad_up);
    tune::parallel_for(0, gate.numel(), kGrain, [&](int64_t begin, int64_t end) {
      swiglu_backward(dp + begin, g + begin, u + begin, dg + begin, du + begin, end - begin);
    });
    return {ctx->needs_input_grad(0) ? grad_gate : torch::Tensor(),
            ctx->needs_input_grad(1) ? grad_up : torch::Tensor()};
  }
};

}  // namespace

bool swiglu_cpu_enabled() {
  // Read at each call (once a layer): tests switch it within one process.
  const char* value = std::getenv("TUNE_CPU_SWIGLU");
  return value == nullptr || std::string_view(value) != "libtorch";
}

bool swiglu_cpu_fits(const torch::Tensor& gate, const torch::Tensor& up) {
  return swiglu_cpu_enabled() && gate.defined() && up.defined() && gate.device().is_cpu() && up.device().is_cpu() &&
         gate.scalar_type() == torch::kBFloat16 && up.scalar_type() == torch::kBFloat16 &&
         gate.sizes() == up.sizes() && gate.numel() > 0 && gate.is_contiguous() && up.is_contiguous();
}

torch::Tensor swiglu_cpu(const torch::Tensor& gate, const torch::Tensor& up) { return CpuSwiglu::apply(gate, up); }

}  // namespace tune::nn
