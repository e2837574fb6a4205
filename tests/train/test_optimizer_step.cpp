// finish_step with the fp16 loss scaler: an injected inf gradient skips the update, halves the scale and leaves the
// weights unchanged; a clean step updates them; a non-finite loss skips without a scaler too.
#include <catch2/catch.hpp>

#include <limits>

#include "tune/train/optimizer_step.h"

namespace {

struct TinyProblem {
  torch::Tensor weight = torch::tensor({1.0f, -2.0f, 3.0f}).requires_grad_(true);
  tune::train::AdamW optimizer{{{{{"weight", weight}}, 0.0}}, tune::train::AdamWOptions{}};

  // Backward of a scaled loss, as the recipe does under fp16.
  void backward(tune::precision::DynamicLossScaler& scaler) {
    auto loss = (weight * weight).sum();
    scaler.scale(loss).backward();
  }
};

}  // namespace

TEST_CASE("finish_step: an injected inf gradient skips the step, halves the scale, keeps the weights") {
  TinyProblem problem;
  tune::precision::DynamicLossScaler scaler;
  problem.backward(scaler);
  problem.weight.mutable_grad()[1] = std::numeric_limits<float>::infinity();
  const auto before = problem.weight.detach().clone();

  const auto outcome = tune::train::finish_step({problem.weight}, problem.optimizer, &scaler, 1.0, 0.1, true);

  CHECK_FALSE(outcome.applied);
  CHECK(outcome.loss_scale == 65536.0);
  CHECK(scaler.current_scale() == 32768.0);
  CHECK(scaler.skipped_steps() == 1);
  CHECK(torch::equal(problem.weight.detach(), before));
  CHECK_FALSE(problem.weight.grad().defined());
  CHECK(problem.optimizer.steps_taken() == 0);
}

TEST_CASE("finish_step: a clean scaled step unscales the gradient before the update") {
  TinyProblem scaled;
  TinyProblem plain;
  tune::precision::DynamicLossScaler scaler;
  tune::precision::DynamicLossScaler unit_scale({1.0, 2.0, 0.5, 2000});
  scaled.backward(scaler);
  plain.backward(unit_scale);
  // The unscaled gradient equals the plain one: d(sum w^2)/dw = 2w.
  const auto outcome = tune::train::finish_step({scaled.weight}, scaled.optimizer, &scaler, 0.0, 0.1, true);
  tune::train::finish_step({plain.weight}, plain.optimizer, nullptr, 0.0, 0.1, true);
  CHECK(outcome.applied);
  CHECK(outcome.grad_norm == Approx(2.0 * std::sqrt(14.0)));
  CHECK(torch::allclose(scaled.weight, plain.weight));
  CHECK(scaler.current_scale() == 65536.0);
  CHECK(scaler.clean_steps() == 1);
}

TEST_CASE("finish_step: a non-finite loss skips the update without a scaler") {
  TinyProblem problem;
  (problem.weight * problem.weight).sum().backward();
  const auto before = problem.weight.detach().clone();
  const auto outcome = tune::train::finish_step({problem.weight}, problem.optimizer, nullptr, 1.0, 0.1, false);
  CHECK_FALSE(outcome.applied);
  CHECK(torch::equal(problem.weight.detach(), before));
}

TEST_CASE("DynamicLossScaler grows after growth_interval clean steps and restores its state") {
  tune::precision::DynamicLossScaler scaler({8.0, 2.0, 0.5, 3});
  scaler.update(false);
  scaler.update(false);
  CHECK(scaler.current_scale() == 8.0);
  scaler.update(false);
  CHECK(scaler.current_scale() == 16.0);
  CHECK(scaler.clean_steps() == 0);
  scaler.update(false);
  scaler.update(true);  // an overflow resets the clean-step count
  CHECK(scaler.current_scale() == 8.0);
  CHECK(scaler.clean_steps() == 0);
  scaler.restore(1024.0, 2, 5);
  scaler.update(false);
  CHECK(scaler.current_scale() == 2048.0);
  CHECK(scaler.skipped_steps() == 5);
}
