// clip_grad_norm against torch.nn.utils.clip_grad_norm_: the same norm, the same scaled gradients.
#include "tune/train/adamw.h"

#include "fixture.h"

#include <catch2/catch.hpp>

using tune::test::load_train_fixture;
using tune::test::max_abs_difference;
using tune::test::tensor_from_json;

TEST_CASE("clip_grad_norm: matches torch for a clipped and an unclipped case") {
  for (const auto& c : load_train_fixture("clip.json")) {
    const double max_norm = c.at("max_norm").get<double>();
    INFO("max_norm " << max_norm);
    std::vector<torch::Tensor> params;
    for (const auto& grad : c.at("grads_before")) {
      auto param = torch::zeros(grad.at("shape").get<std::vector<int64_t>>()).requires_grad_(true);
      param.mutable_grad() = tensor_from_json(grad);
      params.push_back(param);
    }
    params.push_back(torch::zeros({3}).requires_grad_(true));  // no grad: ignored, as torch does
    const double norm = tune::train::clip_grad_norm(params, max_norm);
    CHECK(norm == Approx(c.at("norm").get<double>()).epsilon(1e-6));
    for (size_t i = 0; i < c.at("grads_after").size(); ++i) {
      CHECK(max_abs_difference(params[i].grad(), tensor_from_json(c.at("grads_after")[i])) <= 1e-6);
    }
    CHECK_FALSE(params.back().grad().defined());
  }
}

TEST_CASE("clip_grad_norm: max_norm 0 only measures, and no grads give 0") {
  auto p = torch::zeros({2}).requires_grad_(true);
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});
  CHECK(tune::train::clip_grad_norm({p}, 0.0) == Approx(5.0));
  CHECK(torch::equal(p.grad(), torch::tensor({3.0f, 4.0f})));
  CHECK(tune::train::clip_grad_norm({torch::zeros({2}).requires_grad_(true)}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_norm with gradients sharded over ranks: the global norm, and a rank holding none takes part") {
  // Two ranks' shares of torch's fixture case, in one process: each sees the other's squared norm through
  // sum_over_ranks (what DataParallel passes under shard_grad_op), so both clip by the norm of the whole.
  const auto fixture = load_train_fixture("clip.json");
  const auto& c = fixture.front();
  const double max_norm = c.at("max_norm").get<double>();
  std::vector<torch::Tensor> params;
  for (const auto& grad : c.at("grads_before")) {
    auto param = torch::zeros(grad.at("shape").get<std::vector<int64_t>>()).requires_grad_(true);
    param.mutable_grad() = tensor_from_json(grad);
    params.push_back(param);
  }
  REQUIRE(params.size() >= 2);
  const std::vector<torch::Tensor> first(params.begin(), params.begin() + 1), second(params.begin() + 1, params.end());
  double squared_second = 0.0;
  for (const auto& p : second) squared_second += p.grad().to(torch::kDouble).square().sum().item<double>();
  int calls = 0;
  const double norm = tune::train::clip_grad_norm(first, max_norm, [&](double mine) {
    ++calls;
    return mine + squared_second;
  });
  CHECK(calls == 1);
  CHECK(norm == Approx(c.at("norm").get<double>()).epsilon(1e-6));
  CHECK(max_abs_difference(params[0].grad(), tensor_from_json(c.at("grads_after")[0])) <= 1e-6);
  // A rank that owns no gradient still joins the sum (a collective) and reports the global norm.
  calls = 0;
  const double empty = tune::train::clip_grad_norm({}, max_norm, [&](double mine) {
    ++calls;
    return mine + 25.0;
  });
  CHECK(calls == 1);
  CHECK(empty == Approx(5.0));
}

TEST_CASE("clip_grad_norm_on_device: torch's norm and gradients (the fixture), and clip_grad_norm's exact bits") {
  for (const auto& c : load_train_fixture("clip.json")) {
    const double max_norm = c.at("max_norm").get<double>();
    INFO("max_norm " << max_norm);
    std::vector<torch::Tensor> on_device, on_host;
    for (const auto& grad : c.at("grads_before")) {
      for (auto* list : {&on_device, &on_host}) {
        auto param = torch::zeros(grad.at("shape").get<std::vector<int64_t>>()).requires_grad_(true);
        param.mutable_grad() = tensor_from_json(grad);
        list->push_back(param);
      }
    }
    const torch::Tensor norm = tune::train::clip_grad_norm_on_device(on_device, max_norm);
    REQUIRE(norm.scalar_type() == torch::kDouble);
    CHECK(norm.item<double>() == Approx(c.at("norm").get<double>()).epsilon(1e-6));
    CHECK(norm.item<double>() == tune::train::clip_grad_norm(on_host, max_norm));
    for (size_t i = 0; i < c.at("grads_after").size(); ++i) {
      CHECK(max_abs_difference(on_device[i].grad(), tensor_from_json(c.at("grads_after")[i])) <= 1e-6);
      CHECK(torch::equal(on_device[i].grad(), on_host[i].grad()));
    }
  }
}

TEST_CASE("clip_grad_norm_on_device: a non-finite norm leaves the gradients as they are; no gradients, no norm") {
  auto p = torch::zeros({2}).requires_grad_(true);
  p.mutable_grad() = torch::tensor({std::numeric_limits<float>::infinity(), 4.0f});
  const torch::Tensor norm = tune::train::clip_grad_norm_on_device({p}, 1.0);
  CHECK(std::isinf(norm.item<double>()));
  CHECK(p.grad()[1].item<float>() == 4.0f);
  CHECK_FALSE(tune::train::clip_grad_norm_on_device({torch::zeros({2}).requires_grad_(true)}, 1.0).defined());
}
