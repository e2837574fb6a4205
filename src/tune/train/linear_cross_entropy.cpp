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
#include "tune/train/chunked_output_layer.h"

namespace tune::train {
namespace {

constexpr int64_t kIgnoreIndex = -100;
using chunked::accumulate_product;
using chunked::chunk_logits;
using chunked::product_dtype;
using chunked::rows_per_chunk;

// The loss and, when asked, its gradients, in one walk over the chunks (Liger Kernel's and PyTorch's
// linear_cross_entropy's order: the gradients are computed in forward, so backward only scales them and the
// logits are never recomputed).
struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels, int64_t chunk_rows,
                               bool want_hidden, bool want_weight, double softcap) {
    const auto dtype = product_dtype(hidden, weight);
    // Explicit casts below: autocast must not cast again (and its cast cache must not keep a copy of weight).
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const int64_t time = hidden.size(1), width = hidden.size(2);
    const torch::Tensor rows = hidden.narrow(1, 0, time - 1).reshape({-1, width}).to(dtype);
    const torch::Tensor targets = labels.narrow(1, 1, time - 1).reshape({-1}).to(torch::kLong);
    const torch::Tensor weight_c = weight.to(dtype);
    const int64_t count = rows.size(0);
    const int64_t step = rows_per_chunk(chunk_rows, count, weight.size(0), hidden.is_cuda(), want_weight);

    const auto wide = torch::promote_types(dtype, torch::kFloat);
    torch::Tensor total = torch::zeros({}, rows.options().dtype(wide));
    // d total / d rows (compute dtype, as the plain path's lm_head backward gives) and d total / d weight (wide:
    // every chunk adds to it).
    torch::Tensor grad_rows = want_hidden ? torch::empty_like(rows) : torch::Tensor();
    torch::Tensor grad_weight =
        want_weight ? torch::empty(weight.sizes(), weight.options().dtype(wide)) : torch::Tensor();
    for (int64_t begin = 0; begin < count; begin += step) {
      const int64_t length = std::min(step, count - begin);
      const torch::Tensor rows_c = rows.narrow(0, begin, length);
      torch::Tensor logits = chunk_logits(rows_c, weight_c);
      const torch::Tensor squashed = chunked::soft_cap(logits, softcap);
      const torch::Tensor lse = torch::logsumexp(logits, 1, /*keepdim=*/true);
      const torch::Tensor target = targets.narrow(0, begin, length).unsqueeze(1);
      const torch::Tensor counted = target.ne(kIgnoreIndex).to(wide);
      const torch::Tensor target_logit = logits.gather(1, target.clamp_min(0));
      total.add_(((lse - target_logit) * counted).sum());
      if (!want_hidden && !want_weight) continue;
      // d loss / d logits = softmax - one_hot(target) on counted rows, 0 elsewhere, in place of the logits.
      logits.sub_(lse).exp_();
      logits.scatter_add_(1, target.clamp_min(0), torch::full({length, 1}, -1.0, logits.options()));
      logits.mul_(counted);
      chunked::gradient_through_soft_cap(logits, squashed);
      const torch::Tensor grad_logits = logits.to(dtype);
      if (want_hidden) {
        torch::Tensor out = grad_rows.narrow(0, begin, length);
        torch::mm_out(out, grad_logits, weight_c);
      }
      if (want_weight) accumulate_product(grad_weight, begin == 0, grad_logits, rows_c);
    }
    ctx->save_for_backward({grad_rows, grad_weight});
    ctx->saved_data["hidden_sizes"] = hidden.sizes().vec();
    ctx->saved_data["hidden_dtype"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return total;  // fp32 (fp64 for a float64 model)
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& grad_rows = saved[0];
    const torch::Tensor& grad_weight = saved[1];
    const auto sizes = ctx->saved_data["hidden_sizes"].toIntVector();
    const auto hidden_dtype = static_cast<torch::ScalarType>(ctx->saved_data["hidden_dtype"].toInt());
    const auto weight_dtype = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    torch::NoGradGuard no_grad;
    torch::Tensor grad_hidden, grad_w;
    if (ctx->needs_input_grad(0) && grad_rows.defined()) {
      // The last position scores nothing: its gradient is zero.
      const int64_t time = sizes[1];
      grad_hidden = torch::zeros(sizes, grad_rows.options().dtype(hidden_dtype));
      grad_hidden.narrow(1, 0, time - 1)
          .copy_(grad_rows.view({sizes[0], time - 1, sizes[2]}))
          .mul_(grad_outputs[0].to(hidden_dtype));
    }
    if (ctx->needs_input_grad(1) && grad_weight.defined()) {
      // Scaled in place (no second [V, H] fp32 tensor at the peak); a second backward through this node
      // (retain_graph) is then refused by autograd's version check of the saved tensor.
      grad_w = grad_weight.mul_(grad_outputs[0].to(grad_weight.scalar_type())).to(weight_dtype);
    }
    return {grad_hidden, grad_w, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor causal_lm_linear_loss_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& labels, int64_t chunk_rows, double softcap) {
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
  // Gradients are computed in forward only when backward can ask for them.
  const bool grad_mode = torch::GradMode::is_enabled();
  return LinearCrossEntropy::apply(hidden, weight, labels, chunk_rows, grad_mode && hidden.requires_grad(),
                                   grad_mode && weight.requires_grad(), softcap);
}

}  // namespace tune::train
