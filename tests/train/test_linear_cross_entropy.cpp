// causal_lm_linear_loss_sum (the output projection fused with the loss, chunked) against an independent float64
// computation with torch's own cross_entropy, and against the plain lm_head + causal_lm_loss_sum path under bf16
// autocast (CPU, and CUDA where present).
#include "tune/train/linear_cross_entropy.h"

#include <catch2/catch.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "tune/precision/mixed_precision.h"
#include "tune/train/loss.h"

using tune::train::causal_lm_linear_loss_sum;

namespace {

constexpr int64_t kBatch = 2, kTime = 9, kWidth = 16, kVocab = 37;

// Labels with ignored positions (-100), including a whole ignored tail.
torch::Tensor make_labels() {
  torch::Tensor labels = torch::randint(0, kVocab, {kBatch, kTime}, torch::kLong);
  labels.index_put_({0, 3}, -100);
  labels.index_put_({1, torch::indexing::Slice(6, torch::indexing::None)}, -100);
  return labels;
}

// sum over counted positions of -log softmax(hidden[t] W^T)[labels[t+1]], by torch's cross_entropy.
torch::Tensor reference_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels) {
  const auto logits = torch::matmul(hidden.narrow(1, 0, kTime - 1), weight.t()).reshape({-1, kVocab});
  const auto targets = labels.narrow(1, 1, kTime - 1).reshape({-1});
  return torch::nn::functional::cross_entropy(
      logits, targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
}

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).norm() / b.to(torch::kDouble).norm()).item<double>();
}

}  // namespace

TEST_CASE("linear cross-entropy: float64 loss and gradients equal the unfused formula, over several chunks") {
  torch::manual_seed(3);
  const auto labels = make_labels();
  const auto hidden = torch::randn({kBatch, kTime, kWidth}, torch::kDouble).requires_grad_(true);
  const auto weight = torch::randn({kVocab, kWidth}, torch::kDouble).requires_grad_(true);
  const auto hidden_ref = hidden.detach().clone().requires_grad_(true);
  const auto weight_ref = weight.detach().clone().requires_grad_(true);

  for (int64_t chunk : {3, 5, 0}) {  // 16 scored rows: chunks of 3 (uneven), 5, and the automatic single chunk
    INFO("chunk rows " << chunk);
    hidden.mutable_grad() = torch::Tensor();
    weight.mutable_grad() = torch::Tensor();
    const auto loss = causal_lm_linear_loss_sum(hidden, weight, labels, chunk);
    CHECK(loss.scalar_type() == torch::kDouble);
    const auto expected = reference_loss(hidden_ref, weight_ref, labels);
    CHECK(loss.item<double>() == Approx(expected.item<double>()).epsilon(1e-12));
    loss.backward();
    if (!hidden_ref.grad().defined()) expected.backward();
    CHECK(relative_difference(hidden.grad(), hidden_ref.grad()) < 1e-12);
    CHECK(relative_difference(weight.grad(), weight_ref.grad()) < 1e-12);
    // The last position scores nothing.
    CHECK(hidden.grad().select(1, kTime - 1).abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("linear cross-entropy: a frozen weight gets no gradient, hidden still does") {
  torch::manual_seed(4);
  const auto hidden = torch::randn({kBatch, kTime, kWidth}, torch::kDouble).requires_grad_(true);
  const auto weight = torch::randn({kVocab, kWidth}, torch::kDouble);
  causal_lm_linear_loss_sum(hidden, weight, make_labels(), 4).backward();
  CHECK_FALSE(weight.grad().defined());
  REQUIRE(hidden.grad().defined());
  CHECK(hidden.grad().abs().sum().item<double>() > 0.0);
}

namespace {

// Under bf16 autocast on `device`: the fused loss against lm_head + cast + causal_lm_loss_sum, the plain path.
void check_against_plain_path(const torch::Device& device) {
  torch::manual_seed(5);
  const auto labels = make_labels().to(device);
  const auto hidden = torch::randn({kBatch, kTime, kWidth}, device).requires_grad_(true);
  const auto weight = torch::randn({kVocab, kWidth}, device).requires_grad_(true);
  const auto hidden_plain = hidden.detach().clone().requires_grad_(true);
  const auto weight_plain = weight.detach().clone().requires_grad_(true);
  torch::Tensor fused, plain;
  {
    tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, device);
    fused = causal_lm_linear_loss_sum(hidden, weight, labels, 5);
    plain = tune::train::causal_lm_loss_sum(torch::linear(hidden_plain, weight_plain).to(torch::kFloat), labels);
  }
  CHECK(fused.scalar_type() == torch::kFloat);
  // The same bf16 product, widened: the logits agree bit for bit; the sums differ by fp32 rounding only.
  CHECK(fused.item<double>() == Approx(plain.item<double>()).epsilon(1e-5));
  fused.backward();
  plain.backward();
  CHECK(hidden.grad().scalar_type() == torch::kFloat);
  CHECK(weight.grad().scalar_type() == torch::kFloat);
  // bf16 gradient products on both sides (the plain path rounds the whole [V, H] product once, the fused one
  // each chunk's): agreement to bf16 rounding.
  CHECK(relative_difference(hidden.grad(), hidden_plain.grad()) < 1e-2);
  CHECK(relative_difference(weight.grad(), weight_plain.grad()) < 1e-2);
}

}  // namespace

TEST_CASE("linear cross-entropy: bf16 autocast on CPU matches lm_head + causal_lm_loss_sum") {
  check_against_plain_path(torch::kCPU);
}

TEST_CASE("linear cross-entropy: bf16 autocast on CUDA matches lm_head + causal_lm_loss_sum", "[cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: the CUDA case is not exercised");
    return;
  }
  check_against_plain_path(torch::Device(torch::kCUDA, 0));
}

TEST_CASE("linear cross-entropy: gradients follow the incoming gradient (a normalised loss), and no-grad mode computes "
          "the loss alone") {
  torch::manual_seed(6);
  const auto labels = make_labels();
  const auto hidden = torch::randn({kBatch, kTime, kWidth}, torch::kDouble).requires_grad_(true);
  const auto weight = torch::randn({kVocab, kWidth}, torch::kDouble).requires_grad_(true);
  const auto hidden_ref = hidden.detach().clone().requires_grad_(true);
  const auto weight_ref = weight.detach().clone().requires_grad_(true);
  // As the SFT step divides by the step's token count (and a loss scaler multiplies).
  (causal_lm_linear_loss_sum(hidden, weight, labels, 3) * (-0.37 / 11.0)).backward();
  (reference_loss(hidden_ref, weight_ref, labels) * (-0.37 / 11.0)).backward();
  CHECK(relative_difference(hidden.grad(), hidden_ref.grad()) < 1e-12);
  CHECK(relative_difference(weight.grad(), weight_ref.grad()) < 1e-12);

  torch::Tensor no_grad_loss;
  {
    torch::NoGradGuard no_grad;
    no_grad_loss = causal_lm_linear_loss_sum(hidden, weight, labels, 3);
  }
  CHECK_FALSE(no_grad_loss.requires_grad());
  CHECK(no_grad_loss.item<double>() == Approx(reference_loss(hidden_ref, weight_ref, labels).item<double>()).epsilon(1e-12));
}

TEST_CASE("linear cross-entropy: a second backward through the same graph is refused, not silently double-scaled") {
  torch::manual_seed(7);
  const auto hidden = torch::randn({kBatch, kTime, kWidth}, torch::kDouble).requires_grad_(true);
  const auto weight = torch::randn({kVocab, kWidth}, torch::kDouble).requires_grad_(true);
  const auto loss = causal_lm_linear_loss_sum(hidden, weight, make_labels(), 4);
  loss.backward({}, /*retain_graph=*/true);
  CHECK_THROWS_WITH(loss.backward(), Catch::Matchers::Contains("modified by an inplace operation"));
}
