// Per-row log-probabilities through the output layer in chunks, as an autograd Function that recomputes each
// chunk's logits in backward. Unlike the summed loss (linear_cross_entropy.cpp), the gradients cannot be made in
// forward: each row's upstream gradient (d loss / d log p of that row) is only known in backward, and keeping a
// weight gradient per row would cost a [vocab, hidden] fp32 tensor per sequence. So forward keeps only the scored
// positions' hidden states (a view), and backward walks the chunks once more: logits, softmax, one product for the
// hidden gradient and one for the weight's. One more output-layer product than the summed loss's path.
#include "tune/train/sequence_logps.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include "tune/core/error.h"
#include "tune/train/chunked_output_layer.h"

namespace tune::train {
namespace {

constexpr int64_t kIgnoreIndex = -100;  // the label of unscored positions (PyTorch/HF convention, as loss.h)

// The scored positions of every row: hidden state t predicts label t + 1.
struct ScoredPositions {
  torch::Tensor flat_index;  // [N] int64 into hidden viewed as [R * T, H]
  torch::Tensor row;         // [N] int64: which row each belongs to
  torch::Tensor target;      // [N] int64
};

// `sequence_ids` empty: each row is one sequence; else `row` is the sequence of each scored label.
ScoredPositions scored_positions(const torch::Tensor& labels, const torch::Tensor& sequence_ids) {
  const int64_t time = labels.size(1);
  const torch::Tensor next = labels.narrow(1, 1, time - 1);
  const torch::Tensor mask = next.ne(kIgnoreIndex);
  const torch::Tensor positions = mask.nonzero();  // [N, 2]: (row, t)
  ScoredPositions scored;
  const torch::Tensor row = positions.select(1, 0).contiguous();
  scored.flat_index = row * time + positions.select(1, 1);
  scored.row = sequence_ids.numel() > 0 ? sequence_ids.narrow(1, 1, time - 1).masked_select(mask).to(torch::kLong)
                                        : row;
  scored.target = next.masked_select(mask).to(torch::kLong);
  return scored;
}

struct SequenceLogProbs : public torch::autograd::Function<SequenceLogProbs> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels,
                               const torch::Tensor& sequence_ids, int64_t sequences, int64_t chunk_rows,
                               double softcap) {
    const auto dtype = chunked::product_dtype(hidden, weight);
    // Explicit casts below: autocast must not cast again (and its cast cache must not keep a copy of weight).
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const int64_t rows = sequence_ids.numel() > 0 ? sequences : hidden.size(0), width = hidden.size(2);
    const ScoredPositions scored = scored_positions(labels, sequence_ids);
    const torch::Tensor weight_c = weight.to(dtype);
    const int64_t count = scored.target.size(0);
    const auto wide = torch::promote_types(dtype, torch::kFloat);
    torch::Tensor sums = torch::zeros({rows}, hidden.options().dtype(wide));
    const int64_t step = chunked::rows_per_chunk(chunk_rows, count, weight.size(0), hidden.is_cuda(), false);
    const torch::Tensor flat_hidden = hidden.reshape({-1, width});
    for (int64_t begin = 0; begin < count; begin += step) {
      const int64_t length = std::min(step, count - begin);
      const torch::Tensor states = flat_hidden.index_select(0, scored.flat_index.narrow(0, begin, length)).to(dtype);
      torch::Tensor logits = chunked::chunk_logits(states, weight_c);
      chunked::soft_cap(logits, softcap);
      const torch::Tensor target = scored.target.narrow(0, begin, length).unsqueeze(1);
      const torch::Tensor logp = (logits.gather(1, target) - torch::logsumexp(logits, 1, true)).squeeze(1);
      sums.index_add_(0, scored.row.narrow(0, begin, length), logp);
    }
    ctx->save_for_backward({hidden, weight, scored.flat_index, scored.row, scored.target});
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["softcap"] = softcap;
    return sums;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &flat_index = saved[2], &row = saved[3],
                        &targets = saved[4];
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    torch::NoGradGuard no_grad;
    const bool want_hidden = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    const int64_t width = hidden.size(2), count = targets.size(0);
    const torch::Tensor weight_c = weight.to(dtype);
    const torch::Tensor flat_hidden = hidden.reshape({-1, width});
    const torch::Tensor upstream = grad_outputs[0];
    const auto wide = torch::promote_types(dtype, torch::kFloat);
    torch::Tensor grad_flat = want_hidden ? torch::zeros(flat_hidden.sizes(), hidden.options()) : torch::Tensor();
    torch::Tensor grad_weight =
        want_weight ? torch::empty(weight.sizes(), weight.options().dtype(wide)) : torch::Tensor();
    const int64_t step = chunked::rows_per_chunk(ctx->saved_data["chunk_rows"].toInt(), count, weight.size(0),
                                                 hidden.is_cuda(), want_weight);
    for (int64_t begin = 0; begin < count; begin += step) {
      const int64_t length = std::min(step, count - begin);
      const torch::Tensor index = flat_index.narrow(0, begin, length);
      const torch::Tensor states = flat_hidden.index_select(0, index).to(dtype);
      torch::Tensor logits = chunked::chunk_logits(states, weight_c);
      const torch::Tensor squashed = chunked::soft_cap(logits, ctx->saved_data["softcap"].toDouble());
      // d log p(target) / d logits = one_hot(target) - softmax, times the row's upstream gradient; in place.
      const torch::Tensor lse = torch::logsumexp(logits, 1, true);
      logits.sub_(lse).exp_().neg_();
      logits.scatter_add_(1, targets.narrow(0, begin, length).unsqueeze(1),
                          torch::ones({length, 1}, logits.options()));
      logits.mul_(upstream.index_select(0, row.narrow(0, begin, length)).to(wide).unsqueeze(1));
      chunked::gradient_through_soft_cap(logits, squashed);
      const torch::Tensor grad_logits = logits.to(dtype);
      if (want_hidden) grad_flat.index_add_(0, index, torch::mm(grad_logits, weight_c).to(hidden.scalar_type()));
      if (want_weight) chunked::accumulate_product(grad_weight, begin == 0, grad_logits, states);
    }
    if (want_weight && count == 0) grad_weight.zero_();
    return {want_hidden ? grad_flat.view(hidden.sizes()) : torch::Tensor(),
            want_weight ? grad_weight.to(weight.scalar_type()) : torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int64_t sequence_logps_chunk_rows(int64_t scored, int64_t vocab, bool cuda, bool weight_trains) {
  return chunked::rows_per_chunk(0, scored, vocab, cuda, weight_trains);
}

SequenceLogps causal_lm_sequence_logps(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& labels, int64_t chunk_rows, double softcap) {
  return causal_lm_sequence_logps(hidden, weight, labels, torch::Tensor(), -1, chunk_rows, softcap);
}

SequenceLogps causal_lm_sequence_logps(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& labels, const torch::Tensor& sequence_ids,
                                       int64_t sequences, int64_t chunk_rows, double softcap) {
  if (hidden.dim() != 3 || weight.dim() != 2 || labels.dim() != 2 || hidden.size(2) != weight.size(1) ||
      hidden.size(0) != labels.size(0) || hidden.size(1) != labels.size(1) ||
      (sequence_ids.defined() && (sequence_ids.sizes() != labels.sizes() || sequences < 0))) {
    throw Error(fmt::format("sequence log-probs: expected hidden [R, T, H], weight [V, H], labels [R, T] and "
                            "sequence ids [R, T] (or none), got hidden {}, weight {}, labels {} and sequence ids {}",
                            fmt::join(hidden.sizes(), "x"), fmt::join(weight.sizes(), "x"),
                            fmt::join(labels.sizes(), "x"),
                            sequence_ids.defined() ? fmt::format("{}", fmt::join(sequence_ids.sizes(), "x")) : "none"));
  }
  SequenceLogps logps;
  const auto wide = torch::promote_types(chunked::product_dtype(hidden, weight), torch::kFloat);
  const int64_t outputs = sequence_ids.defined() ? sequences : hidden.size(0);
  if (hidden.size(1) < 2) {
    // Nothing is scored; keep the graph connected so backward still reaches hidden (with zero gradient).
    logps.sums = (hidden.sum() * 0).expand({outputs}).to(wide);
    logps.counts = torch::zeros({outputs}, hidden.options().dtype(torch::kFloat32));
    return logps;
  }
  // An autograd Function takes no undefined tensor: an empty one stands for "one sequence per row".
  const torch::Tensor grouping = sequence_ids.defined() ? sequence_ids : torch::empty({0}, labels.options());
  logps.sums = SequenceLogProbs::apply(hidden, weight, labels, grouping, outputs, chunk_rows, softcap);
  const torch::Tensor scored = labels.narrow(1, 1, labels.size(1) - 1).ne(kIgnoreIndex);
  if (sequence_ids.defined()) {
    const torch::Tensor ids = sequence_ids.narrow(1, 1, labels.size(1) - 1).masked_select(scored).to(torch::kLong);
    logps.counts = torch::zeros({outputs}, labels.options().dtype(torch::kFloat32))
                       .index_add_(0, ids, torch::ones_like(ids, ids.options().dtype(torch::kFloat32)));
  } else {
    logps.counts = scored.sum(1).to(torch::kFloat32);
  }
  return logps;
}

}  // namespace tune::train
