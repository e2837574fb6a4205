#include "tune/train/sequence_logps.h"

#include <torch/torch.h>

#include <vector>

#include "tune/train/linear_cross_entropy.h"

namespace tune::train {

namespace {
constexpr int64_t kIgnoreIndex = -100;  // the label of unscored positions (PyTorch/HF convention, as loss.h)
}  // namespace

SequenceLogps causal_lm_sequence_logps(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& labels) {
  const int64_t rows = hidden.size(0);
  std::vector<torch::Tensor> sums;
  sums.reserve(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    // The loss sum is minus the log-likelihood of the row's scored labels.
    sums.push_back(-causal_lm_linear_loss_sum(hidden.narrow(0, r, 1), weight, labels.narrow(0, r, 1)));
  }
  SequenceLogps logps;
  logps.sums = torch::stack(sums);
  logps.counts = labels.slice(1, 1).ne(kIgnoreIndex).sum(1).to(torch::kFloat32);
  return logps;
}

}  // namespace tune::train
