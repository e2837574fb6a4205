// Softmax of bf16 scores in fp32: tune's vectorised CPU kernel, LibTorch's softmax elsewhere.
#include "tune/nn/softmax_bf16.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

#include "tune/core/parallel.h"
#include "tune/nn/cpu_vector_math.h"

namespace tune::nn {
namespace {

using cpu_vector::bf16_to_float;
using cpu_vector::exp_clamped;
using cpu_vector::float_to_bf16;

// Lanes of the row reductions: independent partial maxima and sums, one per lane, which the vectoriser keeps in one
// AVX-512 register (two AVX2 ones) without reassociating anything; combined in a fixed order at the end.
constexpr int64_t kLanes = 16;

// Below this many e-folds under the row's maximum a probability is taken as 0: e^-87 is fp32's smallest normal.
constexpr float kLowestExponent = -87.0f;

struct RowStats {
  float max;
  bool nan;
};

TUNE_VECTOR_CLONES RowStats row_max(const uint16_t* __restrict row, int64_t length) {
  float lane_max[kLanes];
  int32_t lane_nan[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) {
    lane_max[k] = -std::numeric_limits<float>::infinity();
    lane_nan[k] = 0;
  }
  const int64_t whole = length / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      const float value = bf16_to_float(row[j + k]);
      lane_max[k] = value > lane_max[k] ? value : lane_max[k];
      lane_nan[k] |= static_cast<int32_t>(value != value);
    }
  }
  for (int64_t j = whole; j < length; ++j) {
    const float value = bf16_to_float(row[j]);
    lane_max[0] = value > lane_max[0] ? value : lane_max[0];
    lane_nan[0] |= static_cast<int32_t>(value != value);
  }
  RowStats stats{lane_max[0], lane_nan[0] != 0};
  for (int64_t k = 1; k < kLanes; ++k) {
    stats.max = lane_max[k] > stats.max ? lane_max[k] : stats.max;
    stats.nan = stats.nan || lane_nan[k] != 0;
  }
  return stats;
}

inline float shifted_exp(float value, float max) {
  const float z = value - max;  // <= 0, or NaN when max is -inf (a row of -inf only)
  const float e = exp_clamped(std::max(std::min(z, 0.0f), kLowestExponent));
  return z >= kLowestExponent ? e : 0.0f;  // false for NaN: the sum is then 0 and every output 0 / 0 = NaN
}

// e^(x - max) into `exps`, returning their sum.
TUNE_VECTOR_CLONES float row_exps(const uint16_t* __restrict row, float* __restrict exps, int64_t length, float max) {
  float lane_sum[kLanes] = {};
  const int64_t whole = length / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      const float e = shifted_exp(bf16_to_float(row[j + k]), max);
      exps[j + k] = e;
      lane_sum[k] += e;
    }
  }
  for (int64_t j = whole; j < length; ++j) {
    const float e = shifted_exp(bf16_to_float(row[j]), max);
    exps[j] = e;
    lane_sum[0] += e;
  }
  float sum = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) sum += lane_sum[k];
  return sum;
}

TUNE_VECTOR_CLONES void normalise_fp32(float* __restrict exps, int64_t length, float sum) {
  for (int64_t j = 0; j < length; ++j) exps[j] = exps[j] / sum;
}

TUNE_VECTOR_CLONES void normalise_bf16(const float* __restrict exps, uint16_t* __restrict out, int64_t length,
                                       float sum) {
  for (int64_t j = 0; j < length; ++j) out[j] = float_to_bf16(exps[j] / sum);
}

// Rows [begin, end) of `rows` x `length` scores into fp32 `out_fp32` or, when that is null, bf16 `out_bf16`.
void softmax_rows(const uint16_t* scores, float* out_fp32, uint16_t* out_bf16, int64_t begin, int64_t end,
                  int64_t length) {
  std::vector<float> scratch(out_fp32 == nullptr ? static_cast<size_t>(length) : 0);
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* row = scores + r * length;
    float* exps = out_fp32 != nullptr ? out_fp32 + r * length : scratch.data();
    const RowStats stats = row_max(row, length);
    const float sum = stats.nan ? std::numeric_limits<float>::quiet_NaN() : row_exps(row, exps, length, stats.max);
    if (stats.nan) std::fill(exps, exps + length, std::numeric_limits<float>::quiet_NaN());
    if (out_fp32 != nullptr) {
      if (!stats.nan) normalise_fp32(exps, length, sum);
    } else {
      normalise_bf16(exps, out_bf16 + r * length, length, stats.nan ? 1.0f : sum);
    }
  }
}

// sum_j p_j dp_j for p_j = exps[j] / sum.
TUNE_VECTOR_CLONES float row_dot(const float* __restrict exps, const uint16_t* __restrict grad, int64_t length,
                                 float sum) {
  float lane_dot[kLanes] = {};
  const int64_t whole = length / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) lane_dot[k] += (exps[j + k] / sum) * bf16_to_float(grad[j + k]);
  }
  for (int64_t j = whole; j < length; ++j) lane_dot[0] += (exps[j] / sum) * bf16_to_float(grad[j]);
  float dot = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) dot += lane_dot[k];
  return dot;
}

// p_j = exps[j] / sum and p_j (dp_j - dot), both rounded to bf16.
TUNE_VECTOR_CLONES void row_backward(const float* __restrict exps, const uint16_t* __restrict grad,
                                     uint16_t* __restrict probabilities, uint16_t* __restrict grad_scores,
                                     int64_t length, float sum, float dot) {
  for (int64_t j = 0; j < length; ++j) {
    const float p = exps[j] / sum;
    probabilities[j] = float_to_bf16(p);
    grad_scores[j] = float_to_bf16(p * (bf16_to_float(grad[j]) - dot));
  }
}

void softmax_backward_rows(const uint16_t* scores, const uint16_t* grad, uint16_t* probabilities,
                           uint16_t* grad_scores, int64_t begin, int64_t end, int64_t length) {
  std::vector<float> exps(static_cast<size_t>(length));
  for (int64_t r = begin; r < end; ++r) {
    const int64_t offset = r * length;
    const RowStats stats = row_max(scores + offset, length);
    if (stats.nan) {
      const uint16_t nan = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
      std::fill(probabilities + offset, probabilities + offset + length, nan);
      std::fill(grad_scores + offset, grad_scores + offset + length, nan);
      continue;
    }
    const float sum = row_exps(scores + offset, exps.data(), length, stats.max);
    const float dot = row_dot(exps.data(), grad + offset, length, sum);
    row_backward(exps.data(), grad + offset, probabilities + offset, grad_scores + offset, length, sum, dot);
  }
}

bool libtorch_forced() {
  static const bool forced = [] {
    const char* value = std::getenv("TUNE_CPU_SOFTMAX");
    return value != nullptr && std::string_view(value) == "libtorch";
  }();
  return forced;
}

struct SoftmaxOfBf16 : public torch::autograd::Function<SoftmaxOfBf16> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& scores) {
    torch::Tensor probabilities = softmax_of_bf16_scores(scores, torch::kFloat32);
    ctx->save_for_backward({probabilities});
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(scores.scalar_type());
    return probabilities;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor probabilities = ctx->get_saved_variables()[0];
    // As softmax(x, -1, kFloat)'s own backward for a bf16 x (its half-to-float form, the input's dtype passed to
    // LibTorch's softmax backward); autograd takes what it returns to the input's dtype.
    const auto input_dtype = static_cast<torch::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    return {at::_softmax_backward_data(grad_outputs[0].to(torch::kFloat32), probabilities, -1, input_dtype)};
  }
};

}  // namespace

bool softmax_kernel_enabled() { return !libtorch_forced(); }

bool softmax_uses_tune_kernel(const torch::Tensor& scores) {
  return scores.device().is_cpu() && scores.scalar_type() == torch::kBFloat16 && scores.is_contiguous() &&
         scores.dim() >= 1 && scores.size(-1) > 0 && !libtorch_forced();
}

torch::Tensor softmax_of_bf16_scores(const torch::Tensor& scores, torch::ScalarType out_dtype) {
  if (!softmax_uses_tune_kernel(scores) || (out_dtype != torch::kFloat32 && out_dtype != torch::kBFloat16)) {
    torch::NoGradGuard no_grad;  // the value only, as on tune's path
    return torch::softmax(scores, -1, torch::promote_types(scores.scalar_type(), torch::kFloat32)).to(out_dtype);
  }
  torch::Tensor out = torch::empty(scores.sizes(), scores.options().dtype(out_dtype));
  const int64_t length = scores.size(-1);
  const int64_t rows = scores.numel() / length;
  const auto* in = reinterpret_cast<const uint16_t*>(scores.const_data_ptr());
  float* out_fp32 = out_dtype == torch::kFloat32 ? out.mutable_data_ptr<float>() : nullptr;
  auto* out_bf16 = out_dtype == torch::kFloat32 ? nullptr : reinterpret_cast<uint16_t*>(out.mutable_data_ptr());
  // Rows per task: about 32k scores, enough that a task's time dwarfs the scheduling.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / length);
  tune::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    softmax_rows(in, out_fp32, out_bf16, begin, end, length);
  });
  return out;
}

bool softmax_backward_uses_tune_kernel(const torch::Tensor& scores, const torch::Tensor& grad_probabilities) {
  return softmax_uses_tune_kernel(scores) && grad_probabilities.device().is_cpu() &&
         grad_probabilities.scalar_type() == torch::kBFloat16 && grad_probabilities.is_contiguous() &&
         grad_probabilities.sizes() == scores.sizes();
}

std::pair<torch::Tensor, torch::Tensor> softmax_and_backward_of_bf16_scores(const torch::Tensor& scores,
                                                                            const torch::Tensor& grad_probabilities) {
  TORCH_CHECK(softmax_backward_uses_tune_kernel(scores, grad_probabilities),
              "softmax_and_backward_of_bf16_scores: contiguous bf16 CPU scores and gradient of one shape expected");
  torch::Tensor probabilities = torch::empty_like(scores);
  torch::Tensor grad_scores = torch::empty_like(scores);
  const int64_t length = scores.size(-1);
  const int64_t rows = scores.numel() / length;
  const auto* in = reinterpret_cast<const uint16_t*>(scores.const_data_ptr());
  const auto* grad = reinterpret_cast<const uint16_t*>(grad_probabilities.const_data_ptr());
  auto* p = reinterpret_cast<uint16_t*>(probabilities.mutable_data_ptr());
  auto* ds = reinterpret_cast<uint16_t*>(grad_scores.mutable_data_ptr());
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / length);
  tune::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    softmax_backward_rows(in, grad, p, ds, begin, end, length);
  });
  return {probabilities, grad_scores};
}

torch::Tensor softmax_of_bf16_scores_differentiable(const torch::Tensor& scores) {
  if (!softmax_uses_tune_kernel(scores)) {
    return torch::softmax(scores, -1, torch::promote_types(scores.scalar_type(), torch::kFloat32));
  }
  return SoftmaxOfBf16::apply(scores);
}

}  // namespace tune::nn
