// EMA against the closed form: after n updates with constant decay d and parameter values p_1..p_n,
// ema_n = d^n * p_0 + sum_k (1 - d) d^(n-k) p_k (computed here in float64).
#include <catch2/catch.hpp>

#include "tune/core/error.h"
#include "tune/train/ema.h"

TEST_CASE("EMA follows the closed-form exponential average") {
  auto param = torch::tensor({1.0f, -2.0f}).requires_grad_(true);
  const std::vector<tune::train::NamedParameter> params = {{"w", param}};
  const double decay = 0.9;
  tune::train::ExponentialMovingAverage ema(params, decay);
  std::vector<std::vector<double>> history = {{1.0, -2.0}};
  for (int step = 1; step <= 5; ++step) {
    {
      torch::NoGradGuard no_grad;
      param.add_(static_cast<float>(step));
    }
    history.push_back({param[0].item<double>(), param[1].item<double>()});
    ema.update(params);
  }
  for (int index = 0; index < 2; ++index) {
    const size_t n = history.size() - 1;
    double expected = std::pow(decay, n) * history[0][index];
    for (size_t k = 1; k <= n; ++k) expected += (1 - decay) * std::pow(decay, n - k) * history[k][index];
    CHECK(ema.state()[0].second[index].item<double>() == Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("EMA copy_to loads the averages into the model and load_state checks names and shapes") {
  auto param = torch::zeros({3}).requires_grad_(true);
  const std::vector<tune::train::NamedParameter> params = {{"w", param}};
  tune::train::ExponentialMovingAverage ema(params, 0.5);
  ema.load_state({{"w", torch::tensor({1.0f, 2.0f, 3.0f})}});
  ema.copy_to(params);
  CHECK(torch::equal(param.detach(), torch::tensor({1.0f, 2.0f, 3.0f})));
  CHECK_THROWS_AS(ema.load_state({{"v", torch::zeros({3})}}), tune::InputError);
  CHECK_THROWS_AS(ema.load_state({{"w", torch::zeros({4})}}), tune::InputError);
}

TEST_CASE("EMA with decay 0 is the weights themselves: aliased, not copied, and never loaded over them") {
  auto param = torch::tensor({1.0f, 2.0f}).requires_grad_(true);
  auto bf16 = torch::tensor({3.0f}).to(torch::kBFloat16).requires_grad_(true);
  const std::vector<tune::train::NamedParameter> params = {{"w", param}, {"b", bf16}};
  tune::train::ExponentialMovingAverage ema(params, 0.0);
  // fp32 weights share their storage; a bf16 one still gets its fp32 average (2 elements x 0 + 1 x 4 bytes).
  CHECK(ema.state()[0].second.data_ptr() == param.data_ptr());
  CHECK(ema.state()[1].second.scalar_type() == torch::kFloat32);
  CHECK(ema.copy_bytes() == 4);
  {
    torch::NoGradGuard no_grad;
    param.mul_(3.0f);
  }
  ema.update(params);
  CHECK(torch::equal(ema.state()[0].second, torch::tensor({3.0f, 6.0f})));
  // A checkpoint's averages of another decay do not overwrite the weights; names and shapes are still checked.
  ema.load_state({{"w", torch::tensor({9.0f, 9.0f})}, {"b", torch::tensor({5.0f})}});
  CHECK(torch::equal(param.detach(), torch::tensor({3.0f, 6.0f})));
  CHECK(ema.state()[1].second.item<float>() == 5.0f);
  CHECK_THROWS_AS(ema.load_state({{"w", torch::zeros({3})}, {"b", torch::zeros({1})}}), tune::InputError);
  tune::train::ExponentialMovingAverage copied(params, 0.5);
  CHECK(copied.copy_bytes() == 12);
}
