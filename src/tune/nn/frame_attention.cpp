// Attention over a few frames at each token, straight from the qkv projection (see frame_attention.h).
#include "tune/nn/frame_attention.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "tune/core/parallel.h"
#include "tune/nn/cpu_vector_math.h"

namespace tune::nn {
namespace {

// The per-head maths below is written once and inlined into each instruction set's build of the functions that
// call it (TUNE_VECTOR_CLONES): left to the inliner, it stayed one baseline (SSE2) function the clones called.
#define FRAME_ATTENTION_INLINE inline __attribute__((always_inline))

// Lanes of a dot product: independent partial sums the vectoriser keeps in one AVX-512 register (two AVX2 ones)
// without reassociating anything, then halved pairwise in a fixed order (vector adds, not 15 dependent scalar ones).
constexpr int64_t kLanes = 16;

template <typename acc_t>
FRAME_ATTENTION_INLINE acc_t dot(const acc_t* __restrict a, const acc_t* __restrict b, int64_t n) {
  acc_t lanes[kLanes] = {};
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) lanes[k] += a[j + k] * b[j + k];
  }
  for (int64_t j = whole; j < n; ++j) lanes[j - whole] += a[j] * b[j];
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  return lanes[0];
}

// y += alpha x
template <typename acc_t>
FRAME_ATTENTION_INLINE void axpy(acc_t alpha, const acc_t* __restrict x, acc_t* __restrict y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += alpha * x[j];
}

// e^z for z <= 0: tune's polynomial in fp32 (0 below e^-87, fp32's normal range), libm's in float64.
FRAME_ATTENTION_INLINE float exp_nonpositive(float z) {
  return z >= -87.0f ? cpu_vector::exp_clamped(std::max(z, -87.0f)) : 0.0f;
}
inline double exp_nonpositive(double z) { return std::exp(z); }

// p [frames, frames]: row f the softmax over g of scale * q_f . k_g (q, k: [frames, dim] rows).
template <typename acc_t>
FRAME_ATTENTION_INLINE void probabilities(const acc_t* q, const acc_t* k, int64_t frames, int64_t dim, acc_t scale, acc_t* p) {
  for (int64_t f = 0; f < frames; ++f) {
    acc_t* row = p + f * frames;
    acc_t row_max = -std::numeric_limits<acc_t>::infinity();
    for (int64_t g = 0; g < frames; ++g) {
      row[g] = scale * dot(q + f * dim, k + g * dim, dim);
      row_max = std::max(row_max, row[g]);
    }
    // The exponentials in a loop of their own, which vectorises (a running sum in it would not).
    for (int64_t g = 0; g < frames; ++g) row[g] = exp_nonpositive(row[g] - row_max);
    acc_t sum = 0;
    for (int64_t g = 0; g < frames; ++g) sum += row[g];
    const acc_t inverse = acc_t(1) / sum;
    for (int64_t g = 0; g < frames; ++g) row[g] *= inverse;
  }
}

// One head of one token: out [frames, dim] = p v.
template <typename acc_t>
FRAME_ATTENTION_INLINE void head_forward(const acc_t* q, const acc_t* k, const acc_t* v, int64_t frames, int64_t dim, acc_t scale,
                         acc_t* p, acc_t* out) {
  probabilities(q, k, frames, dim, scale, p);
  std::fill(out, out + frames * dim, acc_t(0));
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t g = 0; g < frames; ++g) axpy(p[f * frames + g], v + g * dim, out + f * dim, dim);
  }
}

// Its gradients from the context's, d_out [frames, dim]: with p recomputed, dv_g = sum_f p_fg d_out_f,
// ds_fg = p_fg (d_out_f . v_g - sum_g' p_fg' d_out_f . v_g') (the softmax backward), dq_f = scale sum_g ds_fg k_g,
// dk_g = scale sum_f ds_fg q_f. `p` and `ds` are [frames, frames] scratch.
template <typename acc_t>
FRAME_ATTENTION_INLINE void head_backward(const acc_t* q, const acc_t* k, const acc_t* v, const acc_t* d_out, int64_t frames,
                          int64_t dim, acc_t scale, acc_t* p, acc_t* ds, acc_t* dq, acc_t* dk, acc_t* dv) {
  probabilities(q, k, frames, dim, scale, p);
  std::fill(dq, dq + frames * dim, acc_t(0));
  std::fill(dk, dk + frames * dim, acc_t(0));
  std::fill(dv, dv + frames * dim, acc_t(0));
  for (int64_t f = 0; f < frames; ++f) {
    const acc_t* p_row = p + f * frames;
    acc_t* ds_row = ds + f * frames;
    acc_t weighted = 0;
    for (int64_t g = 0; g < frames; ++g) {
      axpy(p_row[g], d_out + f * dim, dv + g * dim, dim);
      ds_row[g] = dot(d_out + f * dim, v + g * dim, dim);
      weighted += p_row[g] * ds_row[g];
    }
    for (int64_t g = 0; g < frames; ++g) {
      ds_row[g] = scale * p_row[g] * (ds_row[g] - weighted);
      axpy(ds_row[g], k + g * dim, dq + f * dim, dim);
      axpy(ds_row[g], q + f * dim, dk + g * dim, dim);
    }
  }
}

struct Shape {
  int64_t samples, frames, tokens, heads, dim;
  int64_t width() const { return 3 * heads * dim; }  // a qkv row
  int64_t context_width() const { return heads * dim; }
  // Where (sample, token) `unit`'s first frame row starts in a [B, F, T, row_width] tensor; its next frames follow
  // tokens * row_width apart.
  int64_t row(int64_t unit, int64_t row_width) const {
    const int64_t sample = unit / tokens, token = unit % tokens;
    return (sample * frames * tokens + token) * row_width;
  }
};

// `frames` rows of `dim` values, `stride` apart, widened into `to` [frames, dim]; and back, rounded once.
template <typename scalar_t, typename acc_t>
FRAME_ATTENTION_INLINE void gather(const scalar_t* from, int64_t stride, int64_t frames, int64_t dim, acc_t* to) {
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t j = 0; j < dim; ++j) to[f * dim + j] = static_cast<acc_t>(from[f * stride + j]);
  }
}
template <typename scalar_t, typename acc_t>
FRAME_ATTENTION_INLINE void scatter(const acc_t* from, int64_t frames, int64_t dim, scalar_t* to, int64_t stride) {
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t j = 0; j < dim; ++j) to[f * stride + j] = static_cast<scalar_t>(from[f * dim + j]);
  }
}

// Scratch per parallel task, in acc_t elements.
int64_t forward_scratch(const Shape& s) { return 4 * s.frames * s.dim + s.frames * s.frames; }
int64_t backward_scratch(const Shape& s) { return 7 * s.frames * s.dim + 2 * s.frames * s.frames; }

// Units [begin, end) of the forward: each head's q, k and v rows gathered, its context computed and written.
template <typename scalar_t, typename acc_t>
FRAME_ATTENTION_INLINE void forward_units(const scalar_t* in, scalar_t* out, const Shape& s, acc_t scale,
                                          int64_t begin, int64_t end, acc_t* scratch) {
  const int64_t fd = s.frames * s.dim, in_stride = s.tokens * s.width(), out_stride = s.tokens * s.context_width();
  acc_t *q = scratch, *k = q + fd, *v = k + fd, *o = v + fd, *p = o + fd;
  for (int64_t unit = begin; unit < end; ++unit) {
    const scalar_t* first = in + s.row(unit, s.width());
    scalar_t* first_out = out + s.row(unit, s.context_width());
    for (int64_t h = 0; h < s.heads; ++h) {
      gather(first + h * s.dim, in_stride, s.frames, s.dim, q);
      gather(first + s.context_width() + h * s.dim, in_stride, s.frames, s.dim, k);
      gather(first + 2 * s.context_width() + h * s.dim, in_stride, s.frames, s.dim, v);
      head_forward(q, k, v, s.frames, s.dim, scale, p, o);
      scatter(o, s.frames, s.dim, first_out + h * s.dim, out_stride);
    }
  }
}

// Units [begin, end) of the backward: q's, k's and v's gradients written where q, k and v are in `in`.
template <typename scalar_t, typename acc_t>
FRAME_ATTENTION_INLINE void backward_units(const scalar_t* in, const scalar_t* d_out, scalar_t* d_in, const Shape& s,
                                           acc_t scale, int64_t begin, int64_t end, acc_t* scratch) {
  const int64_t fd = s.frames * s.dim, in_stride = s.tokens * s.width(), out_stride = s.tokens * s.context_width();
  acc_t *q = scratch, *k = q + fd, *v = k + fd, *g = v + fd, *dq = g + fd, *dk = dq + fd, *dv = dk + fd;
  acc_t *p = dv + fd, *ds = p + s.frames * s.frames;
  for (int64_t unit = begin; unit < end; ++unit) {
    const int64_t in_row = s.row(unit, s.width());
    const scalar_t* first_out_grad = d_out + s.row(unit, s.context_width());
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t q_at = in_row + h * s.dim, k_at = q_at + s.context_width(), v_at = k_at + s.context_width();
      gather(in + q_at, in_stride, s.frames, s.dim, q);
      gather(in + k_at, in_stride, s.frames, s.dim, k);
      gather(in + v_at, in_stride, s.frames, s.dim, v);
      gather(first_out_grad + h * s.dim, out_stride, s.frames, s.dim, g);
      head_backward(q, k, v, g, s.frames, s.dim, scale, p, ds, dq, dk, dv);
      scatter(dq, s.frames, s.dim, d_in + q_at, in_stride);
      scatter(dk, s.frames, s.dim, d_in + k_at, in_stride);
      scatter(dv, s.frames, s.dim, d_in + v_at, in_stride);
    }
  }
}

// Each storage dtype's loops built once per instruction set (the conversions vectorise with the maths), as tune's
// other CPU kernels; float64 (tune's maths checks) plain.
#define FRAME_ATTENTION_CLONES(scalar_t, suffix)                                                                      \
  TUNE_VECTOR_CLONES void forward_units_##suffix(const scalar_t* in, scalar_t* out, const Shape& s, float scale,     \
                                                 int64_t begin, int64_t end, float* scratch) {                        \
    forward_units(in, out, s, scale, begin, end, scratch);                                                            \
  }                                                                                                                   \
  TUNE_VECTOR_CLONES void backward_units_##suffix(const scalar_t* in, const scalar_t* d_out, scalar_t* d_in,         \
                                                  const Shape& s, float scale, int64_t begin, int64_t end,            \
                                                  float* scratch) {                                                   \
    backward_units(in, d_out, d_in, s, scale, begin, end, scratch);                                                   \
  }                                                                                                                   \
  void run_forward_units(const scalar_t* in, scalar_t* out, const Shape& s, float scale, int64_t begin, int64_t end, \
                         float* scratch) {                                                                            \
    forward_units_##suffix(in, out, s, scale, begin, end, scratch);                                                   \
  }                                                                                                                   \
  void run_backward_units(const scalar_t* in, const scalar_t* d_out, scalar_t* d_in, const Shape& s, float scale,    \
                          int64_t begin, int64_t end, float* scratch) {                                               \
    backward_units_##suffix(in, d_out, d_in, s, scale, begin, end, scratch);                                          \
  }

FRAME_ATTENTION_CLONES(float, fp32)
FRAME_ATTENTION_CLONES(c10::BFloat16, bf16)
FRAME_ATTENTION_CLONES(c10::Half, fp16)
#undef FRAME_ATTENTION_CLONES

void run_forward_units(const double* in, double* out, const Shape& s, double scale, int64_t begin, int64_t end,
                       double* scratch) {
  forward_units(in, out, s, scale, begin, end, scratch);
}
void run_backward_units(const double* in, const double* d_out, double* d_in, const Shape& s, double scale,
                        int64_t begin, int64_t end, double* scratch) {
  backward_units(in, d_out, d_in, s, scale, begin, end, scratch);
}

// (sample, token) units per parallel task: each is heads x frames^2 x dim x 4 multiply-adds, a few microseconds.
constexpr int64_t kGrain = 16;

Shape shape_of(const torch::Tensor& qkv, int64_t heads) {
  return {qkv.size(0), qkv.size(1), qkv.size(2), heads, qkv.size(3) / (3 * heads)};
}

torch::Tensor forward_values(const torch::Tensor& qkv, int64_t heads, double scale) {
  const Shape s = shape_of(qkv, heads);
  torch::Tensor context = torch::empty({s.samples, s.frames, s.tokens, s.context_width()}, qkv.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, qkv.scalar_type(), "frame_attention", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* in = qkv.const_data_ptr<scalar_t>();
    scalar_t* out = context.mutable_data_ptr<scalar_t>();
    tune::parallel_for(0, s.samples * s.tokens, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> scratch(static_cast<size_t>(forward_scratch(s)));
      run_forward_units(in, out, s, static_cast<acc_t>(scale), begin, end, scratch.data());
    });
  });
  return context;
}

torch::Tensor backward_values(const torch::Tensor& qkv, const torch::Tensor& grad_context, int64_t heads,
                              double scale) {
  const Shape s = shape_of(qkv, heads);
  const torch::Tensor grad = grad_context.to(qkv.scalar_type()).contiguous();
  torch::Tensor grad_qkv = torch::empty_like(qkv, torch::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, qkv.scalar_type(), "frame_attention_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* in = qkv.const_data_ptr<scalar_t>();
    const scalar_t* d_out = grad.const_data_ptr<scalar_t>();
    scalar_t* d_in = grad_qkv.mutable_data_ptr<scalar_t>();
    tune::parallel_for(0, s.samples * s.tokens, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> scratch(static_cast<size_t>(backward_scratch(s)));
      run_backward_units(in, d_out, d_in, s, static_cast<acc_t>(scale), begin, end, scratch.data());
    });
  });
  return grad_qkv;
}

struct FrameAttention : public torch::autograd::Function<FrameAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv, int64_t heads,
                               double scale) {
    ctx->save_for_backward({qkv});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["scale"] = scale;
    return forward_values(qkv, heads, scale);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor qkv = ctx->get_saved_variables()[0];
    return {backward_values(qkv, grad_outputs[0], ctx->saved_data["heads"].toInt(),
                            ctx->saved_data["scale"].toDouble()),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool frame_attention_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TUNE_CPU_FRAME_ATTENTION");
    return value == nullptr || std::string_view(value) != "off";
  }();
  return enabled;
}

bool frame_attention_applies(const torch::Tensor& qkv) {
  const auto dtype = qkv.scalar_type();
  return qkv.device().is_cpu() && qkv.dim() == 4 && qkv.is_contiguous() && qkv.size(1) <= kFrameAttentionMaxFrames &&
         (dtype == torch::kFloat32 || dtype == torch::kFloat64 || dtype == torch::kBFloat16 ||
          dtype == torch::kFloat16) &&
         frame_attention_enabled();
}

torch::Tensor frame_attention(const torch::Tensor& qkv, int64_t heads, double scale) {
  if (!frame_attention_applies(qkv) || heads <= 0 || qkv.size(3) % (3 * heads) != 0) {
    throw std::invalid_argument("frame_attention: qkv must be a contiguous CPU [B, F, T, 3 * heads * head_dim] tensor "
                                "of a floating dtype with at most 64 frames");
  }
  if (torch::GradMode::is_enabled() && qkv.requires_grad()) return FrameAttention::apply(qkv, heads, scale);
  return forward_values(qkv, heads, scale);
}

}  // namespace tune::nn
