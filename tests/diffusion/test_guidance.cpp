// Classifier-free guidance: the combination against the reference, and the wrapper's doubled batch.
#include "tune/diffusion/guidance.h"

#include "diffusion/fixture.h"
#include "tune/core/error.h"

#include <catch2/catch.hpp>

using namespace tune::diffusion;
namespace fx = tune::test::diffusion;

TEST_CASE("diffusion guidance: CFG guides the eps channels and keeps the conditional variance channels") {
  const auto& cfg = fx::fixture().at("cfg");
  const auto doubled = fx::tensor(cfg.at("model_output"));
  const auto combined = combine_classifier_free_guidance(doubled, 3, cfg.at("scale").get<double>(), 2);
  CHECK(fx::max_abs_difference(combined, fx::tensor(cfg.at("combined"))) <= 1e-14);
  // scale 1 is the conditional model
  CHECK(fx::max_abs_difference(combine_classifier_free_guidance(doubled, 3, 1.0, 2), doubled.narrow(0, 0, 2)) <= 1e-15);
  CHECK_THROWS_AS(combine_classifier_free_guidance(doubled.narrow(0, 0, 3), 3, 4.0, 2), tune::Error);
}

TEST_CASE("diffusion guidance: the CFG wrapper runs the model once on [x, x] with [labels, null]") {
  const auto x = torch::randn({2, 2, 3, 2, 2}, torch::kDouble);
  const auto t = torch::tensor({int64_t{10}, int64_t{20}});
  const auto labels = torch::tensor({int64_t{4}, int64_t{7}});
  int calls = 0;
  // output depends on the label so cond and uncond differ: eps = x * y, variance = y
  const ConditionalModelFn model = [&](const torch::Tensor& xx, const torch::Tensor& tt, const torch::Tensor& y) {
    ++calls;
    CHECK(xx.size(0) == 4);
    CHECK(tt.equal(torch::tensor({int64_t{10}, int64_t{20}, int64_t{10}, int64_t{20}})));
    CHECK(y.equal(torch::tensor({int64_t{4}, int64_t{7}, int64_t{101}, int64_t{101}})));
    const auto yy = y.to(torch::kDouble).reshape({-1, 1, 1, 1, 1});
    return torch::cat({xx * yy, yy.expand_as(xx)}, 2);
  };
  const double scale = 3.0;
  const auto guided = classifier_free_guidance(model, labels, torch::tensor({int64_t{101}}), scale)(x, t);
  CHECK(calls == 1);
  const auto y = labels.to(torch::kDouble).reshape({-1, 1, 1, 1, 1});
  const auto expected_eps = x * 101.0 + scale * (x * y - x * 101.0);
  CHECK(fx::max_abs_difference(guided.narrow(2, 0, 3), expected_eps) <= 1e-12);
  CHECK(fx::max_abs_difference(guided.narrow(2, 3, 3), y.expand_as(x)) == 0.0);
}
