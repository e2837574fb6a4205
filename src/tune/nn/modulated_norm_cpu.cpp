// The modulated norms' CPU kernels (header comment).
#include "tune/nn/modulated_norm_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tune/core/parallel.h"
#include "tune/nn/cpu_vector_math.h"
#include "tune/nn/rms_norm_cpu.h"

namespace tune::nn {
namespace {

using cpu_vector::bf16_to_float;
using cpu_vector::float_to_bf16;

// Rows summed into a block's partial sums before the block is added to the group's: a two-level sum, so that a
// token sum over thousands of rows does not add each small term to one large running total.
constexpr int64_t kBlockRows = 64;
// Independent partial sums for the row dot products, as nn/softmax_bf16.cpp's (vectorised without reassociation).
constexpr int64_t kLanes = 16;

inline float round_to_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

TUNE_VECTOR_CLONES void widen_row(const uint16_t* __restrict in, float* __restrict out, int64_t width) {
  for (int64_t i = 0; i < width; ++i) out[i] = bf16_to_float(in[i]);
}

// The gated form's norm input: x + gate * branch, the product rounded to bf16 as the bf16 multiply writes it.
TUNE_VECTOR_CLONES void gated_sum_row(const float* __restrict x, const float* __restrict gate,
                                      const uint16_t* __restrict branch, float* __restrict out, int64_t width) {
  for (int64_t i = 0; i < width; ++i) out[i] = x[i] + round_to_bf16(gate[i] * bf16_to_float(branch[i]));
}

// The normalised row, the gradient into it (grad * (1 + scale)) and the row's terms of the shift's and scale's
// token sums.
TUNE_VECTOR_CLONES void normalise_row(const float* __restrict input, const float* __restrict grad,
                                      const float* __restrict one_plus_scale, float mean, float rstd, int64_t width,
                                      float* __restrict normalised, float* __restrict grad_normalised,
                                      float* __restrict shift_sum, float* __restrict scale_sum) {
  for (int64_t i = 0; i < width; ++i) {
    const float xhat = (input[i] - mean) * rstd;
    const float g = grad[i];
    shift_sum[i] += g;
    scale_sum[i] += g * xhat;
    normalised[i] = xhat;
    grad_normalised[i] = g * one_plus_scale[i];
  }
}

// sum(g) and sum(g * xhat) over the row.
TUNE_VECTOR_CLONES void row_sums(const float* __restrict g, const float* __restrict xhat, int64_t width,
                                 float* sum_g, float* sum_g_xhat) {
  float lane_g[kLanes] = {}, lane_gx[kLanes] = {};
  const int64_t whole = width / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      lane_g[k] += g[j + k];
      lane_gx[k] += g[j + k] * xhat[j + k];
    }
  }
  float total_g = 0.0f, total_gx = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) {
    total_g += lane_g[k];
    total_gx += lane_gx[k];
  }
  for (int64_t j = whole; j < width; ++j) {
    total_g += g[j];
    total_gx += g[j] * xhat[j];
  }
  *sum_g = total_g;
  *sum_g_xhat = total_gx;
}

// LayerNorm's input gradient: rstd * (g - mean(g) - xhat * mean(g * xhat)).
TUNE_VECTOR_CLONES void input_gradient_row(const float* __restrict g, const float* __restrict xhat, float rstd,
                                           float mean_g, float mean_g_xhat, int64_t width, float* __restrict out) {
  for (int64_t i = 0; i < width; ++i) out[i] = rstd * (g[i] - mean_g - xhat[i] * mean_g_xhat);
}

TUNE_VECTOR_CLONES void add_row(float* __restrict inout, const float* __restrict other, int64_t width) {
  for (int64_t i = 0; i < width; ++i) inout[i] += other[i];
}

// The gated sum's gradient s into the product gate * branch: rounded to bf16 (the product's dtype) first, then the
// branch's gradient bf16(s * gate) and the row's term bf16(s * branch) of the gate's token sum.
TUNE_VECTOR_CLONES void gate_branch_row(const float* __restrict grad_sum, const float* __restrict gate,
                                        const uint16_t* __restrict branch, uint16_t* __restrict grad_branch,
                                        float* __restrict gate_sum, int64_t width) {
  for (int64_t i = 0; i < width; ++i) {
    const float product_grad = round_to_bf16(grad_sum[i]);
    grad_branch[i] = float_to_bf16(product_grad * gate[i]);
    gate_sum[i] += round_to_bf16(product_grad * bf16_to_float(branch[i]));
  }
}

// A row's mean and 1 / sqrt(variance + eps), the variance about the mean (two passes over the cached row).
TUNE_VECTOR_CLONES void row_moments(const float* __restrict row, int64_t width, float eps, float* mean, float* rstd) {
  float lane[kLanes] = {};
  const int64_t whole = width / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) lane[k] += row[j + k];
  }
  float total = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) total += lane[k];
  for (int64_t j = whole; j < width; ++j) total += row[j];
  const float row_mean = total / static_cast<float>(width);
  float squares[kLanes] = {};
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      const float centred = row[j + k] - row_mean;
      squares[k] += centred * centred;
    }
  }
  float square_total = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) square_total += squares[k];
  for (int64_t j = whole; j < width; ++j) square_total += (row[j] - row_mean) * (row[j] - row_mean);
  *mean = row_mean;
  *rstd = 1.0f / std::sqrt(square_total / static_cast<float>(width) + eps);
}

// (row - mean) * rstd * (1 + scale) + shift, the product and the sum rounded separately as the two-op form's.
TUNE_VECTOR_CLONES void modulate_row(const float* __restrict row, float mean, float rstd,
                                     const float* __restrict one_plus_scale, const float* __restrict shift,
                                     int64_t width, float* __restrict out) {
  for (int64_t i = 0; i < width; ++i) {
    const float normalised = (row[i] - mean) * rstd;
    const float scaled = normalised * one_plus_scale[i];
    out[i] = scaled + shift[i];
  }
}

TUNE_VECTOR_CLONES void narrow_row(const float* __restrict in, uint16_t* __restrict out, int64_t width) {
  for (int64_t i = 0; i < width; ++i) out[i] = float_to_bf16(in[i]);
}

TUNE_VECTOR_CLONES void flush_block(float* __restrict total, float* __restrict block, int64_t width) {
  for (int64_t i = 0; i < width; ++i) {
    total[i] += block[i];
    block[i] = 0.0f;
  }
}

bool is_rows_of(const torch::Tensor& t, const torch::Tensor& like, torch::ScalarType dtype) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == dtype && t.sizes() == like.sizes() &&
         t.is_contiguous();
}

// [N, D] with unit inner stride (a chunk of the modulation's output is a strided view of it).
bool is_per_group(const torch::Tensor& t, const torch::Tensor& x) {
  return t.defined() && t.device().is_cpu() && t.dim() == 2 && t.size(0) == x.size(0) && t.size(1) == x.size(2) &&
         t.stride(1) == 1;
}

template <typename T>
const T* data_of(const torch::Tensor& t) {
  return reinterpret_cast<const T*>(t.const_data_ptr());
}

template <typename T>
T* data_of(torch::Tensor& t) {
  return reinterpret_cast<T*>(t.mutable_data_ptr());
}

// Work items for a kernel that sums over each group's tokens: a group's tokens split into this many parts (partial
// sums added afterwards) only where there are fewer groups than threads, so that every thread has work.
int64_t token_parts(int64_t groups, int64_t tokens) {
  const int64_t threads = at::get_num_threads();
  return std::min<int64_t>(tokens, std::max<int64_t>(1, (threads + groups - 1) / groups));
}

// [groups, parts, width] partial sums -> [groups, width].
torch::Tensor group_sums(const torch::Tensor& partial) {
  return partial.size(1) == 1 ? partial.squeeze(1) : partial.sum(1);
}

}  // namespace

bool gated_residual_fits(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& branch) {
  return cpu_norm_kernels_enabled() && x.defined() && x.device().is_cpu() && x.dim() == 3 &&
         x.scalar_type() == torch::kFloat && x.is_contiguous() && x.numel() > 0 && is_per_group(gate, x) &&
         gate.scalar_type() == torch::kBFloat16 && is_rows_of(branch, x, torch::kBFloat16);
}

torch::Tensor gated_residual_forward_cpu(const torch::Tensor& x, const torch::Tensor& gate,
                                         const torch::Tensor& branch) {
  torch::NoGradGuard no_grad;
  const int64_t tokens = x.size(1), width = x.size(2);
  const torch::Tensor wide_gate = gate.to(torch::kFloat).contiguous();
  torch::Tensor sum = torch::empty(x.sizes(), x.options());
  const float* x_data = data_of<float>(x);
  const float* gate_data = data_of<float>(wide_gate);
  const uint16_t* branch_data = data_of<uint16_t>(branch);
  float* sum_data = data_of<float>(sum);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / width);
  tune::parallel_for(0, x.size(0) * tokens, grain, [&](int64_t first_row, int64_t end_row) {
    for (int64_t row = first_row; row < end_row; ++row) {
      const int64_t offset = row * width;
      gated_sum_row(x_data + offset, gate_data + row / tokens * width, branch_data + offset, sum_data + offset,
                    width);
    }
  });
  return sum;
}

GatedResidualGradients gated_residual_backward_cpu(const torch::Tensor& grad_sum, const torch::Tensor& gate,
                                                   const torch::Tensor& branch) {
  torch::NoGradGuard no_grad;
  const torch::Tensor grad = grad_sum.to(torch::kFloat).contiguous();
  const int64_t groups = grad.size(0), tokens = grad.size(1), width = grad.size(2);
  const int64_t parts = token_parts(groups, tokens);
  const torch::Tensor wide_gate = gate.to(torch::kFloat).contiguous();
  torch::Tensor gate_parts = torch::zeros({groups, parts, width}, grad.options());
  GatedResidualGradients out;
  out.branch = torch::empty(grad.sizes(), branch.options());
  const float* grad_data = data_of<float>(grad);
  const float* gate_data = data_of<float>(wide_gate);
  const uint16_t* branch_data = data_of<uint16_t>(branch);
  uint16_t* branch_grad_data = data_of<uint16_t>(out.branch);
  float* gate_parts_data = data_of<float>(gate_parts);
  tune::parallel_for(0, groups * parts, 1, [&](int64_t first_item, int64_t end_item) {
    std::vector<float> block_gate(static_cast<size_t>(width), 0.0f);
    for (int64_t item = first_item; item < end_item; ++item) {
      const int64_t group = item / parts, part = item % parts;
      const int64_t token_begin = tokens * part / parts, token_end = tokens * (part + 1) / parts;
      for (int64_t token = token_begin; token < token_end; ++token) {
        const int64_t offset = (group * tokens + token) * width;
        gate_branch_row(grad_data + offset, gate_data + group * width, branch_data + offset,
                        branch_grad_data + offset, block_gate.data(), width);
        if ((token - token_begin + 1) % kBlockRows == 0 || token + 1 == token_end) {
          flush_block(gate_parts_data + item * width, block_gate.data(), width);
        }
      }
    }
  });
  out.gate = group_sums(gate_parts);
  return out;
}

bool modulated_norm_forward_fits(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                 torch::ScalarType out_dtype, const GatedResidualInputs* gated) {
  if (!cpu_norm_kernels_enabled() || !x.defined() || !x.device().is_cpu() || x.dim() != 3 ||
      x.scalar_type() != torch::kFloat || !x.is_contiguous() || x.numel() == 0) {
    return false;
  }
  const auto modulation_fits = [&x](const torch::Tensor& t) {
    return is_per_group(t, x) && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16);
  };
  if (!modulation_fits(shift) || !modulation_fits(scale)) return false;
  if (out_dtype != torch::kFloat && out_dtype != torch::kBFloat16) return false;
  return gated == nullptr || (is_per_group(gated->gate, x) && gated->gate.scalar_type() == torch::kBFloat16 &&
                              is_rows_of(gated->branch, x, torch::kBFloat16));
}

ModulatedNormForward modulated_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& shift,
                                                const torch::Tensor& scale, double eps, torch::ScalarType out_dtype,
                                                const GatedResidualInputs* gated) {
  torch::NoGradGuard no_grad;
  const int64_t groups = x.size(0), tokens = x.size(1), width = x.size(2);
  const auto fp32 = x.options().dtype(torch::kFloat);
  // (1 + scale) in scale's dtype, then widened, as the two-op form multiplies by it; the shift's values widened.
  const torch::Tensor one_plus_scale = (1 + scale).to(torch::kFloat).contiguous();
  const torch::Tensor wide_shift = shift.to(torch::kFloat).contiguous();
  const torch::Tensor gate = gated ? gated->gate.to(torch::kFloat).contiguous() : torch::Tensor();
  ModulatedNormForward out;
  if (gated) out.sum = torch::empty(x.sizes(), fp32);
  out.output = torch::empty(x.sizes(), x.options().dtype(out_dtype));
  out.mean = torch::empty({groups, tokens, 1}, fp32);
  out.rstd = torch::empty({groups, tokens, 1}, fp32);

  const float* x_data = data_of<float>(x);
  const float* one_plus_scale_data = data_of<float>(one_plus_scale);
  const float* shift_data = data_of<float>(wide_shift);
  const float* gate_data = gated ? data_of<float>(gate) : nullptr;
  const uint16_t* branch_data = gated ? data_of<uint16_t>(gated->branch) : nullptr;
  float* sum_data = gated ? data_of<float>(out.sum) : nullptr;
  void* output_data = out.output.mutable_data_ptr();
  float* mean_data = data_of<float>(out.mean);
  float* rstd_data = data_of<float>(out.rstd);
  const bool narrow_output = out_dtype == torch::kBFloat16;
  const auto row_eps = static_cast<float>(eps);

  // Rows per task: enough that a task's time dwarfs the scheduling.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / width);
  tune::parallel_for(0, groups * tokens, grain, [&](int64_t first_row, int64_t end_row) {
    std::vector<float> scratch(narrow_output ? static_cast<size_t>(width) : 0);
    for (int64_t row = first_row; row < end_row; ++row) {
      const int64_t group = row / tokens, offset = row * width;
      const float* input = x_data + offset;
      if (gated) {
        gated_sum_row(input, gate_data + group * width, branch_data + offset, sum_data + offset, width);
        input = sum_data + offset;
      }
      float mean = 0.0f, rstd = 0.0f;
      row_moments(input, width, row_eps, &mean, &rstd);
      mean_data[row] = mean;
      rstd_data[row] = rstd;
      float* modulated = narrow_output ? scratch.data() : static_cast<float*>(output_data) + offset;
      modulate_row(input, mean, rstd, one_plus_scale_data + group * width, shift_data + group * width, width,
                   modulated);
      if (narrow_output) narrow_row(modulated, static_cast<uint16_t*>(output_data) + offset, width);
    }
  });
  return out;
}

bool modulated_norm_backward_fits(const torch::Tensor& grad_normed, const torch::Tensor& x, const torch::Tensor& mean,
                                  const torch::Tensor& rstd, const torch::Tensor& scale,
                                  const GatedResidualInputs* gated) {
  if (!cpu_norm_kernels_enabled() || !x.defined() || !x.device().is_cpu() || x.dim() != 3 ||
      x.scalar_type() != torch::kFloat || !x.is_contiguous() || x.numel() == 0) {
    return false;
  }
  const bool grad_fits =
      is_rows_of(grad_normed, x, torch::kFloat) || is_rows_of(grad_normed, x, torch::kBFloat16);
  const int64_t rows = x.size(0) * x.size(1);
  const auto statistics_fit = [rows](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.numel() == rows &&
           t.is_contiguous();
  };
  if (!grad_fits || !statistics_fit(mean) || !statistics_fit(rstd) || !is_per_group(scale, x)) return false;
  if (gated == nullptr) return true;
  return is_per_group(gated->gate, x) && gated->gate.scalar_type() == torch::kBFloat16 &&
         is_rows_of(gated->branch, x, torch::kBFloat16) &&
         (!gated->grad_sum_outside.defined() || is_rows_of(gated->grad_sum_outside, x, torch::kFloat));
}

ModulatedNormGradients modulated_norm_backward_cpu(const torch::Tensor& grad_normed, const torch::Tensor& x,
                                                   const torch::Tensor& mean, const torch::Tensor& rstd,
                                                   const torch::Tensor& scale, const GatedResidualInputs* gated) {
  torch::NoGradGuard no_grad;
  const int64_t groups = x.size(0), tokens = x.size(1), width = x.size(2);
  const int64_t parts = token_parts(groups, tokens);
  const auto fp32 = x.options().dtype(torch::kFloat);
  // (1 + scale) in scale's dtype, then widened, as the autograd form's backward multiplies by it.
  const torch::Tensor one_plus_scale = (1 + scale).to(torch::kFloat).contiguous();
  const torch::Tensor gate = gated ? gated->gate.to(torch::kFloat).contiguous() : torch::Tensor();
  const bool narrow_grad = grad_normed.scalar_type() == torch::kBFloat16;

  ModulatedNormGradients out;
  out.input = torch::empty(x.sizes(), fp32);
  torch::Tensor shift_parts = torch::zeros({groups, parts, width}, fp32);
  torch::Tensor scale_parts = torch::zeros({groups, parts, width}, fp32);
  torch::Tensor gate_parts = gated ? torch::zeros({groups, parts, width}, fp32) : torch::Tensor();
  if (gated) out.branch = torch::empty(x.sizes(), gated->branch.options());

  const float* x_data = data_of<float>(x);
  const float* mean_data = data_of<float>(mean);
  const float* rstd_data = data_of<float>(rstd);
  const float* one_plus_scale_data = data_of<float>(one_plus_scale);
  const float* gate_data = gated ? data_of<float>(gate) : nullptr;
  const uint16_t* branch_data = gated ? data_of<uint16_t>(gated->branch) : nullptr;
  const float* outside_data =
      gated && gated->grad_sum_outside.defined() ? data_of<float>(gated->grad_sum_outside) : nullptr;
  const void* grad_data = grad_normed.const_data_ptr();
  float* input_grad_data = data_of<float>(out.input);
  uint16_t* branch_grad_data = gated ? data_of<uint16_t>(out.branch) : nullptr;
  float* shift_parts_data = data_of<float>(shift_parts);
  float* scale_parts_data = data_of<float>(scale_parts);
  float* gate_parts_data = gated ? data_of<float>(gate_parts) : nullptr;
  const float inverse_width = 1.0f / static_cast<float>(width);

  tune::parallel_for(0, groups * parts, 1, [&](int64_t first_item, int64_t end_item) {
    // Scratch rows: the norm's input, the incoming gradient widened, the normalised row, the gradient into it, and
    // the current block's partial sums.
    std::vector<float> scratch(static_cast<size_t>(7 * width), 0.0f);
    float* input_row = scratch.data();
    float* grad_row = input_row + width;
    float* normalised = grad_row + width;
    float* grad_normalised = normalised + width;
    float* block_shift = grad_normalised + width;
    float* block_scale = block_shift + width;
    float* block_gate = block_scale + width;
    for (int64_t item = first_item; item < end_item; ++item) {
      const int64_t group = item / parts, part = item % parts;
      const int64_t token_begin = tokens * part / parts, token_end = tokens * (part + 1) / parts;
      float* shift_total = shift_parts_data + item * width;
      float* scale_total = scale_parts_data + item * width;
      float* gate_total = gated ? gate_parts_data + item * width : nullptr;
      const float* one_plus = one_plus_scale_data + group * width;
      const float* gate_row = gated ? gate_data + group * width : nullptr;
      for (int64_t token = token_begin; token < token_end; ++token) {
        const int64_t row = group * tokens + token;
        const int64_t offset = row * width;
        const float* input = x_data + offset;
        if (gated) {
          gated_sum_row(x_data + offset, gate_row, branch_data + offset, input_row, width);
          input = input_row;
        }
        const float* grad = static_cast<const float*>(grad_data) + offset;
        if (narrow_grad) {
          widen_row(static_cast<const uint16_t*>(grad_data) + offset, grad_row, width);
          grad = grad_row;
        }
        const float rstd_row = rstd_data[row];
        normalise_row(input, grad, one_plus, mean_data[row], rstd_row, width, normalised, grad_normalised,
                      block_shift, block_scale);
        float sum_g = 0.0f, sum_g_xhat = 0.0f;
        row_sums(grad_normalised, normalised, width, &sum_g, &sum_g_xhat);
        float* input_grad = input_grad_data + offset;
        input_gradient_row(grad_normalised, normalised, rstd_row, sum_g * inverse_width, sum_g_xhat * inverse_width,
                           width, input_grad);
        if (gated) {
          if (outside_data != nullptr) add_row(input_grad, outside_data + offset, width);
          gate_branch_row(input_grad, gate_row, branch_data + offset, branch_grad_data + offset, block_gate, width);
        }
        if ((token - token_begin + 1) % kBlockRows == 0 || token + 1 == token_end) {
          flush_block(shift_total, block_shift, width);
          flush_block(scale_total, block_scale, width);
          if (gated) flush_block(gate_total, block_gate, width);
        }
      }
    }
  });

  out.shift = group_sums(shift_parts);
  out.scale = group_sums(scale_parts);
  if (gated) out.gate = group_sums(gate_parts);
  return out;
}

}  // namespace tune::nn
