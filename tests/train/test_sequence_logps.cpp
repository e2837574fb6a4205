// train/sequence_logps against a float64 reference: log_softmax of hidden @ weight^T gathered at the next labels,
// summed per row, and its gradients by float64 autograd; chunks smaller than the scored positions, so several
// chunks and a partial last one are exercised, with unscored positions (-100) inside and at the ends of rows.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "tune/train/sequence_logps.h"

namespace {

torch::Tensor reference_sums(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels) {
  const int64_t time = hidden.size(1);
  const torch::Tensor logp = torch::log_softmax(torch::matmul(hidden, weight.t()), -1).narrow(1, 0, time - 1);
  const torch::Tensor next = labels.narrow(1, 1, time - 1);
  const torch::Tensor mask = next.ne(-100);
  return (logp.gather(2, next.clamp_min(0).unsqueeze(2)).squeeze(2) * mask).sum(1);
}

}  // namespace

TEST_CASE("sequence_logps: per-row sums and both gradients equal float64 autograd, in chunks", "[train][sequence_logps]") {
  torch::manual_seed(11);
  const int64_t rows = 3, time = 9, width = 16, vocab = 40;
  const auto hidden = torch::randn({rows, time, width}).requires_grad_(true);
  const auto weight = (torch::randn({vocab, width}) * 0.3).requires_grad_(true);
  auto labels = torch::randint(0, vocab, {rows, time});
  labels.index_put_({0, torch::indexing::Slice(0, 4)}, -100);  // a prompt
  labels.index_put_({1, 5}, -100);                               // a hole
  labels.index_put_({2, torch::indexing::Slice(6, time)}, -100);  // padding at the end
  const auto upstream = torch::randn({rows});
  for (const int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{5}}) {
    INFO("chunk rows " << chunk);
    hidden.mutable_grad() = torch::Tensor();
    weight.mutable_grad() = torch::Tensor();
    const tune::train::SequenceLogps logps = tune::train::causal_lm_sequence_logps(hidden, weight, labels, chunk);
    (logps.sums * upstream).sum().backward();

    const auto hidden64 = hidden.detach().to(torch::kDouble).requires_grad_(true);
    const auto weight64 = weight.detach().to(torch::kDouble).requires_grad_(true);
    const auto expected = reference_sums(hidden64, weight64, labels);
    (expected * upstream.to(torch::kDouble)).sum().backward();
    CHECK(torch::allclose(logps.sums.to(torch::kDouble), expected, 1e-5, 1e-5));
    CHECK(torch::equal(logps.counts, labels.narrow(1, 1, time - 1).ne(-100).sum(1).to(torch::kFloat)));
    CHECK(torch::allclose(hidden.grad().to(torch::kDouble), hidden64.grad(), 1e-5, 1e-5));
    CHECK(torch::allclose(weight.grad().to(torch::kDouble), weight64.grad(), 1e-5, 1e-5));
    // The last position predicts nothing: no gradient there.
    CHECK(hidden.grad().select(1, time - 1).abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("sequence_logps: a frozen weight gets no gradient, and a row with nothing scored sums to 0", "[train][sequence_logps]") {
  torch::manual_seed(12);
  const auto hidden = torch::randn({2, 5, 8}).requires_grad_(true);
  const auto weight = torch::randn({12, 8});
  auto labels = torch::randint(0, 12, {2, 5});
  labels.index_put_({1}, -100);
  const auto logps = tune::train::causal_lm_sequence_logps(hidden, weight, labels, 2);
  CHECK(logps.sums[1].item<double>() == 0.0);
  CHECK(logps.counts[1].item<double>() == 0.0);
  logps.sums.sum().backward();
  CHECK(!weight.grad().defined());
  CHECK(hidden.grad()[1].abs().max().item<double>() == 0.0);
}

TEST_CASE("sequence_logps: sequences packed in rows sum per sequence, as the float64 reference of each alone",
          "[train][sequence_logps]") {
  torch::manual_seed(13);
  const int64_t time = 10, width = 8, vocab = 30;
  const auto hidden = torch::randn({2, time, width}).requires_grad_(true);
  const auto weight = (torch::randn({vocab, width}) * 0.3).requires_grad_(true);
  auto labels = torch::randint(0, vocab, {2, time});
  // Row 0 holds sequence 2 (positions 0-5) then sequence 0 (6-9); row 1 holds sequence 1 (0-7) and padding. A
  // sequence's first position is never labelled; sequence 2 has a prompt of 2 tokens.
  auto ids = torch::full({2, time}, int64_t{-1}, torch::kLong);
  ids.index_put_({0, torch::indexing::Slice(0, 6)}, 2);
  ids.index_put_({0, torch::indexing::Slice(6, time)}, 0);
  ids.index_put_({1, torch::indexing::Slice(0, 8)}, 1);
  for (const auto& [row, column] : {std::pair{0, 0}, {0, 1}, {0, 6}, {1, 0}, {1, 8}, {1, 9}}) {
    labels.index_put_({row, column}, -100);
  }
  const auto logps = tune::train::causal_lm_sequence_logps(hidden, weight, labels, ids, 3, 4);
  const auto upstream = torch::tensor({0.5, -1.0, 2.0});
  (logps.sums * upstream).sum().backward();

  // The reference: each sequence alone in a row of its own (float64), its gradients mapped back.
  const auto hidden64 = hidden.detach().to(torch::kDouble).requires_grad_(true);
  const auto weight64 = weight.detach().to(torch::kDouble).requires_grad_(true);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> spans = {{0, 6, 10}, {1, 0, 8}, {0, 0, 6}};  // by sequence
  std::vector<torch::Tensor> sums;
  for (const auto& [row, begin, end] : spans) {
    const auto slice = torch::indexing::Slice(begin, end);
    sums.push_back(reference_sums(hidden64.index({torch::indexing::Slice(row, row + 1), slice}), weight64,
                                  labels.index({torch::indexing::Slice(row, row + 1), slice}))[0]);
  }
  const auto expected = torch::stack(sums);
  (expected * upstream.to(torch::kDouble)).sum().backward();
  CHECK(torch::allclose(logps.sums.to(torch::kDouble), expected, 1e-5, 1e-5));
  CHECK(torch::equal(logps.counts, torch::tensor({3.0f, 7.0f, 4.0f})));
  CHECK(torch::allclose(hidden.grad().to(torch::kDouble), hidden64.grad(), 1e-5, 1e-5));
  CHECK(torch::allclose(weight.grad().to(torch::kDouble), weight64.grad(), 1e-5, 1e-5));
}
