// causal_lm_loss_sum against torch cross_entropy(reduction='sum') on shifted labels, with ignored positions,
// fp32 and bf16 logits, and its gradient.
#include "tune/train/loss.h"

#include "fixture.h"
#include "tune/core/error.h"

#include <catch2/catch.hpp>

using tune::test::load_train_fixture;
using tune::test::max_abs_difference;
using tune::test::tensor_from_json;
using namespace tune::train;

namespace {
torch::Tensor labels_from(const nlohmann::json& fixture) {
  const auto& entry = fixture.at("labels");
  return torch::tensor(entry.at("values").get<std::vector<int64_t>>(), torch::kLong)
      .reshape(entry.at("shape").get<std::vector<int64_t>>());
}
}  // namespace

TEST_CASE("causal LM loss: fp32 sum and gradient match torch cross_entropy on shifted labels") {
  const auto fixture = load_train_fixture("loss.json");
  auto logits = tensor_from_json(fixture.at("logits")).requires_grad_(true);
  const auto labels = labels_from(fixture);
  auto loss = causal_lm_loss_sum(logits, labels);
  CHECK(loss.scalar_type() == torch::kFloat);
  CHECK(loss.dim() == 0);
  CHECK(loss.item<double>() == Approx(fixture.at("loss_sum").get<double>()).epsilon(1e-6));
  loss.backward();
  CHECK(max_abs_difference(logits.grad(), tensor_from_json(fixture.at("grad"))) <= 1e-6);
  CHECK(causal_lm_loss_tokens(labels) == fixture.at("tokens").get<int64_t>());
}

TEST_CASE("causal LM loss: bf16 logits are scored in fp32") {
  const auto fixture = load_train_fixture("loss.json");
  auto logits = tensor_from_json(fixture.at("logits_bf16"), torch::kBFloat16).requires_grad_(true);
  auto loss = causal_lm_loss_sum(logits, labels_from(fixture));
  CHECK(loss.scalar_type() == torch::kFloat);
  CHECK(loss.item<double>() == Approx(fixture.at("loss_sum_bf16").get<double>()).epsilon(1e-6));
  loss.backward();
  CHECK(logits.grad().scalar_type() == torch::kBFloat16);
}

TEST_CASE("causal LM loss: all positions ignored or a single position give 0") {
  auto logits = torch::randn({1, 4, 5});
  CHECK(causal_lm_loss_sum(logits, torch::full({1, 4}, -100, torch::kLong)).item<double>() == 0.0);
  CHECK(causal_lm_loss_tokens(torch::full({1, 4}, -100, torch::kLong)) == 0);
  CHECK(causal_lm_loss_sum(torch::randn({2, 1, 5}), torch::zeros({2, 1}, torch::kLong)).item<double>() == 0.0);
  CHECK_THROWS_AS(causal_lm_loss_sum(torch::randn({2, 3}), torch::zeros({2, 3}, torch::kLong)), tune::Error);
}
