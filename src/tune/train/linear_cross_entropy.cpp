// Chunked cross-entropy over hidden @ weight^T (see linear_cross_entropy.h).
#include "tune/train/linear_cross_entropy.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>

#include "tune/compat/torch_compat.h"
#include "tune/core/error.h"

namespace tune::train {
namespace {

constexpr int64_t kIgnoreIndex = -100;
// A chunk's fp32 logits stay under this many bytes (plus the same again in the compute dtype, and the softmax's
// temporaries): small against the model at real vocabularies, large enough for full-width products.
constexpr int64_t kChunkLogitBytes = int64_t{256} << 20;

// The dtype the lm_head product would run in: autocast's for hidden's device when on there, else hidden's.
torch::ScalarType product_dtype(const torch::Tensor& hidden, const torch::Tensor& weight) {
  if (hidden.is_cuda() && compat::autocast_cuda_enabled()) return compat::autocast_cuda_dtype();
  if (hidden.is_cpu() && compat::autocast_cpu_enabled()) return compat::autocast_cpu_dtype();
  return torch::promote_types(hidden.scalar_type(), weight.scalar_type());
}

int64_t rows_per_chunk(int64_t requested, int64_t rows, int64_t vocab) {
  if (requested > 0) return requested;
  return std::clamp<int64_t>(kChunkLogitBytes / (vocab * 4), 1, std::max<int64_t>(rows, 1));
}

// fp32 (or wider) logits of one chunk: the product in the compute dtype, then widened, as lm_head + .to(float).
torch::Tensor chunk_logits(const torch::Tensor& hidden_rows, const torch::Tensor& weight) {
  return torch::matmul(hidden_rows, weight.t()).to(torch::promote_types(hidden_rows.scalar_type(), torch::kFloat));
}

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels, int64_t chunk_rows) {
    const auto dtype = product_dtype(hidden, weight);
    // Explicit casts below: autocast must not cast again (and its cast cache must not keep a copy of weight).
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const int64_t time = hidden.size(1), width = hidden.size(2);
    const torch::Tensor rows = hidden.narrow(1, 0, time - 1).reshape({-1, width}).to(dtype);
    const torch::Tensor targets = labels.narrow(1, 1, time - 1).reshape({-1}).to(torch::kLong);
    const torch::Tensor weight_c = weight.to(dtype);
    const int64_t count = rows.size(0);
    const int64_t step = rows_per_chunk(chunk_rows, count, weight.size(0));

    const auto wide = torch::promote_types(dtype, torch::kFloat);
    torch::Tensor log_sum_exp = torch::empty({count}, rows.options().dtype(wide));
    torch::Tensor total = torch::zeros({}, rows.options().dtype(wide));
    for (int64_t begin = 0; begin < count; begin += step) {
      const int64_t length = std::min(step, count - begin);
      const torch::Tensor logits = chunk_logits(rows.narrow(0, begin, length), weight_c);
      const torch::Tensor lse = torch::logsumexp(logits, 1);
      log_sum_exp.narrow(0, begin, length).copy_(lse);
      const torch::Tensor target = targets.narrow(0, begin, length);
      const torch::Tensor counted = target.ne(kIgnoreIndex);
      const torch::Tensor target_logit = logits.gather(1, target.clamp_min(0).unsqueeze(1)).squeeze(1);
      total.add_(((lse - target_logit) * counted).sum());
    }
    ctx->save_for_backward({hidden, weight, labels, log_sum_exp});
    ctx->saved_data["chunk_rows"] = step;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    return total;  // fp32 (fp64 for a float64 model)
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& labels = saved[2];
    const torch::Tensor& log_sum_exp = saved[3];
    const int64_t step = ctx->saved_data["chunk_rows"].toInt();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const bool want_hidden = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::NoGradGuard no_grad;

    const int64_t time = hidden.size(1), width = hidden.size(2);
    const torch::Tensor rows = hidden.narrow(1, 0, time - 1).reshape({-1, width}).to(dtype);
    const torch::Tensor targets = labels.narrow(1, 1, time - 1).reshape({-1}).to(torch::kLong);
    const torch::Tensor weight_c = weight.to(dtype);
    const torch::Tensor grad_total = grad_outputs[0].to(log_sum_exp.scalar_type());
    const int64_t count = rows.size(0);

    torch::Tensor grad_rows = want_hidden ? torch::empty_like(rows) : torch::Tensor();
    // fp32 (or wider) accumulator: every chunk adds its [V, H] product.
    torch::Tensor grad_weight =
        want_weight ? torch::zeros(weight.sizes(), weight.options().dtype(log_sum_exp.scalar_type())) : torch::Tensor();
    for (int64_t begin = 0; begin < count; begin += step) {
      const int64_t length = std::min(step, count - begin);
      const torch::Tensor rows_c = rows.narrow(0, begin, length);
      const torch::Tensor target = targets.narrow(0, begin, length);
      const torch::Tensor counted = target.ne(kIgnoreIndex);
      // d loss / d logits = softmax - one_hot(target) on counted rows, 0 elsewhere; times the incoming gradient.
      torch::Tensor grad_logits = chunk_logits(rows_c, weight_c);
      grad_logits.sub_(log_sum_exp.narrow(0, begin, length).unsqueeze(1)).exp_();
      grad_logits.scatter_add_(1, target.clamp_min(0).unsqueeze(1),
                               torch::full({length, 1}, -1.0, grad_logits.options()));
      grad_logits.mul_((counted.to(grad_logits.scalar_type()) * grad_total).unsqueeze(1));
      const torch::Tensor grad_logits_c = grad_logits.to(dtype);
      if (want_hidden) grad_rows.narrow(0, begin, length).copy_(torch::matmul(grad_logits_c, weight_c));
      if (want_weight) grad_weight.add_(torch::matmul(grad_logits_c.t(), rows_c));
    }
    torch::Tensor grad_hidden;
    if (want_hidden) {
      // The last position scores nothing: its gradient is zero.
      grad_hidden = torch::zeros(hidden.sizes(), hidden.options());
      grad_hidden.narrow(1, 0, time - 1).copy_(grad_rows.view({hidden.size(0), time - 1, width}));
    }
    return {grad_hidden, want_weight ? grad_weight.to(weight.scalar_type()) : torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor causal_lm_linear_loss_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& labels, int64_t chunk_rows) {
  if (hidden.dim() != 3 || weight.dim() != 2 || labels.dim() != 2 || hidden.size(2) != weight.size(1) ||
      hidden.size(0) != labels.size(0) || hidden.size(1) != labels.size(1)) {
    throw Error(fmt::format("causal LM loss: expected hidden [B, T, H], weight [V, H] and labels [B, T], got hidden {}, "
                            "weight {} and labels {}",
                            fmt::join(hidden.sizes(), "x"), fmt::join(weight.sizes(), "x"),
                            fmt::join(labels.sizes(), "x")));
  }
  if (hidden.size(1) < 2) {
    // Nothing is scored; keep the graph connected so backward still reaches hidden (with zero gradient).
    return (hidden.sum() * 0).to(torch::kFloat);
  }
  return LinearCrossEntropy::apply(hidden, weight, labels, chunk_rows);
}

}  // namespace tune::train
