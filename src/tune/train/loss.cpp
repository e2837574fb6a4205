// Next-token cross-entropy: shift by one, score in fp32, ignore -100, sum (the caller divides by the token count
// of the whole accumulated batch).
#include "tune/train/loss.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

namespace tune::train {
namespace {

constexpr int64_t kIgnoreIndex = -100;

void check_shapes(const torch::Tensor& logits, const torch::Tensor& labels) {
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) ||
      logits.size(1) != labels.size(1)) {
    throw Error(fmt::format("causal LM loss: expected logits [B, T, V] and labels [B, T], got logits {} and labels {}",
                            fmt::join(logits.sizes(), "x"), fmt::join(labels.sizes(), "x")));
  }
}

}  // namespace

torch::Tensor causal_lm_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels) {
  check_shapes(logits, labels);
  const int64_t time = logits.size(1);
  const int64_t vocab = logits.size(2);
  if (time < 2) return torch::zeros({}, logits.options().dtype(torch::kFloat));
  // Slice before casting so the fp32 copy (the largest tensor of the step for big vocabularies) covers only
  // the scored positions; the cast of the non-contiguous slice is contiguous, so the reshape is a view.
  auto scored = logits.narrow(1, 0, time - 1).to(torch::kFloat).reshape({-1, vocab});
  auto targets = labels.narrow(1, 1, time - 1).to(torch::kLong).reshape({-1});
  auto log_probs = torch::log_softmax(scored, /*dim=*/-1);
  return torch::nll_loss(log_probs, targets, /*weight=*/{}, at::Reduction::Sum, kIgnoreIndex);
}

int64_t causal_lm_loss_tokens(const torch::Tensor& labels) {
  if (labels.dim() != 2) {
    throw Error(fmt::format("causal LM loss: expected labels [B, T], got {}", fmt::join(labels.sizes(), "x")));
  }
  if (labels.size(1) < 2) return 0;
  return labels.narrow(1, 1, labels.size(1) - 1).ne(kIgnoreIndex).sum().item<int64_t>();
}

}  // namespace tune::train
