// RMSNorm's CPU kernels (header comment).
#include "tune/nn/rms_norm_cpu.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tune/core/parallel.h"
#include "tune/nn/cpu_vector_math.h"

namespace tune::nn {
namespace {

// Independent partial sums for a row's sum (vectorised without reassociation), as nn/modulated_norm_cpu.cpp's.
constexpr int64_t kLanes = 16;
// Rows summed into a block's partial weight gradient before it is added to the part's total (a two-level sum: the
// weight's gradient sums over every token, and adding each small term to one large total loses its low bits).
constexpr int64_t kBlockRows = 64;

TUNE_VECTOR_CLONES float sum_of_squares(const float* __restrict row, int64_t width) {
  float lane[kLanes] = {};
  const int64_t whole = width / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) lane[k] += row[j + k] * row[j + k];
  }
  float total = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) total += lane[k];
  for (int64_t j = whole; j < width; ++j) total += row[j] * row[j];
  return total;
}

// scale * (x * rstd), the normalised value rounded to fp32 before the product as the two-op form's.
TUNE_VECTOR_CLONES void scale_row(const float* __restrict row, float rstd, const float* __restrict scale,
                                  int64_t width, float* __restrict out) {
  for (int64_t i = 0; i < width; ++i) {
    const float normalised = row[i] * rstd;
    out[i] = normalised * scale[i];
  }
}

// sum over the row of (grad * scale) * normalised: the rstd term of the input's gradient.
TUNE_VECTOR_CLONES float row_dot(const float* __restrict grad, const float* __restrict row,
                                 const float* __restrict scale, float rstd, int64_t width) {
  float lane[kLanes] = {};
  const int64_t whole = width / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) lane[k] += grad[j + k] * scale[j + k] * (row[j + k] * rstd);
  }
  float total = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) total += lane[k];
  for (int64_t j = whole; j < width; ++j) total += grad[j] * scale[j] * (row[j] * rstd);
  return total;
}

// x's gradient rstd * (g * scale - normalised * mean(g * scale * normalised)) and, where wanted, the row's term
// g * normalised of the weight's gradient.
TUNE_VECTOR_CLONES void gradient_row(const float* __restrict grad, const float* __restrict row,
                                     const float* __restrict scale, float rstd, float mean_dot, int64_t width,
                                     float* __restrict grad_input, float* __restrict weight_block) {
  for (int64_t i = 0; i < width; ++i) {
    const float normalised = row[i] * rstd;
    if (grad_input != nullptr) grad_input[i] = rstd * (grad[i] * scale[i] - normalised * mean_dot);
    if (weight_block != nullptr) weight_block[i] += grad[i] * normalised;
  }
}

TUNE_VECTOR_CLONES void add_block_rows(float* __restrict total, float* __restrict block, int64_t width) {
  for (int64_t i = 0; i < width; ++i) {
    total[i] += block[i];
    block[i] = 0.0f;
  }
}

// The per-element factor: the weight, or 1 + weight rounded to fp32 (Gemma's form, as fp32's 1 + weight).
torch::Tensor scale_of(const torch::Tensor& weight, bool zero_centred) {
  torch::NoGradGuard no_grad;
  return zero_centred ? (weight + 1.0).contiguous() : weight.contiguous();
}


// Rows per task: enough that a task's time dwarfs the scheduling.
int64_t grain_rows(int64_t width) { return std::max<int64_t>(1, (int64_t{1} << 15) / width); }

struct CpuRmsNorm : public torch::autograd::Function<CpuRmsNorm> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, double eps, bool zero_centred) {
    const int64_t width = input.size(-1), rows = input.numel() / width;
    const torch::Tensor scale = scale_of(weight, zero_centred);
    torch::Tensor output = torch::empty(input.sizes(), input.options());
    torch::Tensor rstd = torch::empty({rows}, input.options());
    const float* x = input.const_data_ptr<float>();
    const float* s = scale.const_data_ptr<float>();
    float* out = output.mutable_data_ptr<float>();
    float* r = rstd.mutable_data_ptr<float>();
    const auto row_eps = static_cast<float>(eps);
    tune::parallel_for(0, rows, grain_rows(width), [&](int64_t first, int64_t end) {
      for (int64_t row = first; row < end; ++row) {
        const float* x_row = x + row * width;
        // 1 / sqrt as ATen's rsqrt computes it (a division, not the approximate instruction).
        r[row] = 1.0f / std::sqrt(sum_of_squares(x_row, width) / static_cast<float>(width) + row_eps);
        scale_row(x_row, r[row], s, width, out + row * width);
      }
    });
    ctx->save_for_backward({input, weight, rstd});
    ctx->saved_data["zero_centred"] = zero_centred;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& rstd = saved[2];
    const bool want_input = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    if (!want_input && !want_weight) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const int64_t width = input.size(-1), rows = input.numel() / width;
    const torch::Tensor grad = grad_outputs[0].to(torch::kFloat).contiguous();
    const torch::Tensor scale = scale_of(weight, ctx->saved_data["zero_centred"].toBool());
    torch::Tensor grad_input = want_input ? torch::empty(input.sizes(), input.options()) : torch::Tensor();
    const float* g = grad.const_data_ptr<float>();
    const float* x = input.const_data_ptr<float>();
    const float* s = scale.const_data_ptr<float>();
    const float* r = rstd.const_data_ptr<float>();
    float* gx = want_input ? grad_input.mutable_data_ptr<float>() : nullptr;
    // Rows [begin, end): the input's gradient, and with `weight_total` their terms of the weight's gradient added
    // to it in blocks of rows.
    auto run_rows = [&](int64_t begin, int64_t end, float* weight_total) {
      std::vector<float> block(weight_total != nullptr ? static_cast<size_t>(width) : 0, 0.0f);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t offset = row * width;
        const float mean_dot = row_dot(g + offset, x + offset, s, r[row], width) / static_cast<float>(width);
        gradient_row(g + offset, x + offset, s, r[row], mean_dot, width, gx != nullptr ? gx + offset : nullptr,
                     weight_total != nullptr ? block.data() : nullptr);
        if (weight_total != nullptr && ((row - begin + 1) % kBlockRows == 0 || row + 1 == end)) {
          add_block_rows(weight_total, block.data(), width);
        }
      }
    };
    if (!want_weight) {
      tune::parallel_for(0, rows, grain_rows(width),
                         [&](int64_t begin, int64_t end) { run_rows(begin, end, nullptr); });
      return {grad_input, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    // The weight's gradient sums over every row: each thread's part of the rows sums its own, added up after.
    const int64_t parts = std::min<int64_t>(rows, std::max(1, at::get_num_threads()));
    torch::Tensor weight_parts = torch::zeros({parts, width}, input.options());
    float* gw = weight_parts.mutable_data_ptr<float>();
    tune::parallel_for(0, parts, 1, [&](int64_t first_part, int64_t end_part) {
      for (int64_t part = first_part; part < end_part; ++part) {
        run_rows(rows * part / parts, rows * (part + 1) / parts, gw + part * width);
      }
    });
    torch::Tensor grad_weight = parts == 1 ? weight_parts.squeeze(0) : weight_parts.sum(0);
    return {grad_input, grad_weight, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool cpu_norm_kernels_enabled() {
  // Read at each call (a few hundred a step): tests switch it within one process.
  const char* value = std::getenv("TUNE_CPU_NORM");
  return value == nullptr || std::string_view(value) != "libtorch";
}

bool rms_norm_cpu_fits(const torch::Tensor& input, const torch::Tensor& weight) {
  return cpu_norm_kernels_enabled() && input.defined() && input.device().is_cpu() &&
         input.scalar_type() == torch::kFloat && input.dim() >= 1 && input.numel() > 0 && input.is_contiguous() &&
         weight.defined() && weight.device().is_cpu() && weight.scalar_type() == torch::kFloat && weight.dim() == 1 &&
         weight.size(0) == input.size(-1);
}

torch::Tensor rms_norm_cpu(const torch::Tensor& input, const torch::Tensor& weight, double eps, bool zero_centred) {
  return CpuRmsNorm::apply(input, weight, eps, zero_centred);
}

}  // namespace tune::nn
