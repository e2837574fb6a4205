// Sana's flow-matching objective (src/tune/diffusion/flow_matching.h) against closed forms in float64: the shifted
// sigma table against s (t/T) / (1 + (s - 1) t/T), the model timesteps against numpy's values (literals below),
// the timestep densities against their distribution functions over many draws, and x_t, the target and the loss
// against their definitions.
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "tune/core/error.h"
#include "tune/diffusion/flow_matching.h"

using namespace tune;
using namespace tune::diffusion;

namespace {

// Share of draws at or below x.
double empirical_cdf(const torch::Tensor& u, double x) {
  return (u.to(torch::kDouble) <= x).to(torch::kDouble).mean().item<double>();
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Standard normal quantiles at 0.1, 0.25, 0.5, 0.75, 0.9.
const std::vector<std::pair<double, double>> kNormalQuantiles = {
    {0.1, -1.2815515655446004}, {0.25, -0.6744897501960817}, {0.5, 0.0}, {0.75, 0.6744897501960817},
    {0.9, 1.2815515655446004}};

constexpr int64_t kDraws = 200000;
// The empirical CDF of kDraws draws has standard deviation <= 0.5 / sqrt(kDraws) = 0.0011; 0.005 is > 4 of them.
constexpr double kCdfTolerance = 0.005;

FlowMatchingDraw draw(const FlowMatchingOptions& options, uint64_t seed, int64_t batch = kDraws) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  return FlowMatchingObjective(options).draw(batch, generator);
}

}  // namespace

TEST_CASE("flow matching: the sigma table is the shifted t / T", "[diffusion][flow_matching]") {
  for (double shift : {1.0, 3.0, 4.0, 0.5}) {
    INFO("shift " << shift);
    FlowMatchingOptions options;
    options.flow_shift = shift;
    const FlowMatchingObjective objective(options);
    const auto& sigmas = objective.sigmas();
    REQUIRE(sigmas.size() == 1000);
    double worst = 0.0;
    for (int64_t t = 0; t < 1000; ++t) {
      // 1 - linspace(1, 1/T, T)[t] = t (1 - 1/T) / (T - 1) = t / T exactly in real arithmetic
      const double base = static_cast<double>(t) / 1000.0;
      const double expected = shift * base / (1.0 + (shift - 1.0) * base);
      worst = std::max(worst, std::abs(sigmas[static_cast<size_t>(t)] - expected));
    }
    CHECK(worst < 1e-14);
    CHECK(sigmas.front() == 0.0);  // index 0: the clean sample
  }
}

TEST_CASE("flow matching: the model's integer timesteps are numpy's trunc(sigma' T)", "[diffusion][flow_matching]") {
  // numpy: torch.from_numpy(s * b / (1 + (s - 1) * b) * 1000).to(torch.int64), b = 1 - np.linspace(1.0, 0.001,
  // 1000), at the indices below. float64 rounding puts some of them one below the real-number value (100 -> 99
  // unshifted, 100 -> 249 for s = 3), which a model trained by the official code has seen.
  const std::vector<int64_t> indices = {0, 1, 2, 3, 7, 100, 333, 500, 999};
  const std::vector<std::pair<double, std::vector<int64_t>>> expected = {
      {1.0, {0, 1, 2, 3, 7, 99, 332, 500, 999}}, {3.0, {0, 2, 5, 8, 20, 249, 599, 750, 999}}};
  for (const auto& [shift, timesteps] : expected) {
    INFO("shift " << shift);
    FlowMatchingOptions options;
    options.flow_shift = shift;
    options.density = TimestepDensity::uniform;  // 20000 draws reach every index (each missed with p ~ 2e-9)
    const auto result = draw(options, 7, 20000);
    // every drawn row: index -> model timestep as in the numpy table, sigma the table's
    int checked = 0;
    for (size_t k = 0; k < indices.size(); ++k) {
      const auto rows = (result.index == indices[k]).nonzero().flatten();
      if (rows.numel() == 0) continue;
      CHECK((result.model_timesteps.index_select(0, rows) == timesteps[k]).all().item<bool>());
      ++checked;
    }
    CHECK(checked == 9);
    // and for every row: timestep = trunc(sigma T) of the row's own sigma, sigma the closed form within 1e-14
    const auto base = result.index.to(torch::kDouble) / 1000.0;
    const auto closed_form = shift * base / (1.0 + (shift - 1.0) * base);
    CHECK((result.sigma - closed_form).abs().max().item<double>() < 1e-14);
    CHECK(torch::equal(result.model_timesteps, (result.sigma * 1000.0).floor().to(torch::kLong)));
  }
}

TEST_CASE("flow matching: the index is trunc(u T) of the draw", "[diffusion][flow_matching]") {
  FlowMatchingOptions options;
  const auto result = draw(options, 11, 5000);
  CHECK(result.u.scalar_type() == torch::kFloat);
  // the official (u * 1000).long(): a float32 product, truncated
  CHECK(torch::equal(result.index, (result.u * 1000.0f).floor().to(torch::kLong)));
  CHECK(result.index.min().item<int64_t>() >= 0);
  CHECK(result.index.max().item<int64_t>() <= 999);
}

TEST_CASE("flow matching: logit-normal draws have the logit-normal distribution", "[diffusion][flow_matching]") {
  for (const auto& [mean, std] : std::vector<std::pair<double, double>>{{0.0, 1.0}, {0.5, 0.7}, {-1.0, 2.0}}) {
    INFO("mean " << mean << ", std " << std);
    FlowMatchingOptions options;
    options.logit_mean = mean;
    options.logit_std = std;
    const auto u = draw(options, 1234).u.to(torch::kDouble);
    CHECK(u.min().item<double>() > 0.0);
    CHECK(u.max().item<double>() < 1.0 + 1e-7);
    // logit(u) ~ N(mean, std^2): its sample mean and std within 4 standard errors
    const auto logits = torch::log(u) - torch::log1p(-u);
    const double standard_error = std / std::sqrt(static_cast<double>(kDraws));
    CHECK(std::abs(logits.mean().item<double>() - mean) < 4 * standard_error);
    CHECK(std::abs(logits.std().item<double>() - std) < 4 * standard_error);
    // quantiles: P(u <= sigmoid(mean + std z_q)) = q
    for (const auto& [q, z] : kNormalQuantiles) {
      INFO("quantile " << q);
      CHECK(std::abs(empirical_cdf(u, sigmoid(mean + std * z)) - q) < kCdfTolerance);
    }
  }
}

TEST_CASE("flow matching: uniform and mode densities", "[diffusion][flow_matching]") {
  SECTION("uniform (also \"none\")") {
    FlowMatchingOptions options;
    options.density = parse_timestep_density("none");
    CHECK(options.density == TimestepDensity::uniform);
    const auto u = draw(options, 99).u;
    for (double q : {0.1, 0.25, 0.5, 0.9}) CHECK(std::abs(empirical_cdf(u, q) - q) < kCdfTolerance);
    CHECK(std::abs(u.to(torch::kDouble).mean().item<double>() - 0.5) < 0.003);
  }
  SECTION("mode: u = g(v), g decreasing for scale 1.29, so P(u <= g(q)) = 1 - q") {
    FlowMatchingOptions options;
    options.density = parse_timestep_density("mode");
    options.mode_scale = 1.29;
    const auto u = draw(options, 5).u;
    const double pi = std::acos(-1.0);
    for (double q : {0.1, 0.3, 0.5, 0.7, 0.9}) {
      const double c = std::cos(pi * q / 2);
      const double g = 1 - q - 1.29 * (c * c - 1 + q);
      INFO("v quantile " << q << ", u " << g);
      CHECK(std::abs(empirical_cdf(u, g) - (1 - q)) < kCdfTolerance);
    }
  }
  SECTION("other names are refused, naming the accepted ones") {
    try {
      parse_timestep_density("cosmap");
      FAIL("expected tune::UsageError");
    } catch (const UsageError& error) {
      CHECK_THAT(error.what(), Catch::Contains("cosmap") && Catch::Contains("logit_normal"));
    }
  }
}

TEST_CASE("flow matching: a seed fixes the draw, and a rank's rows are the global draw's",
          "[diffusion][flow_matching]") {
  FlowMatchingOptions options;
  options.flow_shift = 3.0;
  const auto global = draw(options, 42, 8);
  const auto again = draw(options, 42, 8);
  CHECK(torch::equal(global.u, again.u));
  CHECK(torch::equal(global.model_timesteps, again.model_timesteps));
  const auto rank_one = global.rows(4, 8);
  CHECK(torch::equal(rank_one.u, global.u.slice(0, 4, 8)));
  CHECK(torch::equal(rank_one.index, global.index.slice(0, 4, 8)));
  CHECK(torch::equal(rank_one.sigma, global.sigma.slice(0, 4, 8)));
  CHECK(torch::equal(rank_one.model_timesteps, global.model_timesteps.slice(0, 4, 8)));
  CHECK_FALSE(torch::equal(global.u, draw(options, 43, 8).u));
}

TEST_CASE("flow matching: x_t, the target and the per-sample loss are their definitions",
          "[diffusion][flow_matching]") {
  const auto x0 = torch::randn({3, 2, 4, 5}, torch::kDouble);
  const auto noise = torch::randn({3, 2, 4, 5}, torch::kDouble);
  const auto sigma = torch::tensor({0.0, 0.37, 1.0}, torch::kDouble);
  const auto pair = flow_matching_pair(x0, noise, sigma);
  REQUIRE(pair.noisy.sizes() == x0.sizes());
  double worst_noisy = 0.0, worst_target = 0.0;
  const auto x0_a = x0.accessor<double, 4>(), noise_a = noise.accessor<double, 4>();
  const auto noisy_a = pair.noisy.accessor<double, 4>(), target_a = pair.target.accessor<double, 4>();
  for (int64_t b = 0; b < 3; ++b) {
    const double s = sigma[b].item<double>();
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w) {
          const double expected = (1 - s) * x0_a[b][c][h][w] + s * noise_a[b][c][h][w];
          worst_noisy = std::max(worst_noisy, std::abs(noisy_a[b][c][h][w] - expected));
          const double target = noise_a[b][c][h][w] - x0_a[b][c][h][w];
          worst_target = std::max(worst_target, std::abs(target_a[b][c][h][w] - target));
        }
  }
  CHECK(worst_noisy < 1e-15);
  CHECK(worst_target == 0.0);
  CHECK(torch::equal(pair.noisy[0], x0[0]));     // sigma 0: the clean sample
  CHECK(torch::equal(pair.noisy[2], noise[2]));  // sigma 1: pure noise

  // a model that predicts the target exactly has zero loss; otherwise the mean of the squared error per sample
  const auto prediction = pair.target + torch::arange(3, torch::kDouble).reshape({3, 1, 1, 1}) * 0.5;
  const auto loss = flow_matching_loss_per_sample(prediction, pair.target);
  REQUIRE(loss.sizes() == torch::IntArrayRef{3});
  CHECK(loss[0].item<double>() == 0.0);
  CHECK(std::abs(loss[1].item<double>() - 0.25) < 1e-15);
  CHECK(std::abs(loss[2].item<double>() - 1.0) < 1e-15);
  const auto random_prediction = torch::randn({3, 2, 4, 5}, torch::kDouble);
  const auto random_loss = flow_matching_loss_per_sample(random_prediction, pair.target);
  for (int64_t b = 0; b < 3; ++b) {
    double sum = 0.0;
    const auto p = random_prediction[b].flatten(), t = pair.target[b].flatten();
    for (int64_t i = 0; i < 40; ++i) sum += std::pow(p[i].item<double>() - t[i].item<double>(), 2);
    CHECK(std::abs(random_loss[b].item<double>() - sum / 40.0) < 1e-14);
  }
  // bf16 predictions are compared in float32
  const auto bf16_loss =
      flow_matching_loss_per_sample(prediction.to(torch::kBFloat16), pair.target.to(torch::kBFloat16));
  CHECK(bf16_loss.scalar_type() == torch::kFloat);
  CHECK_THROWS_AS(flow_matching_loss_per_sample(prediction, pair.target[0]), Error);
  CHECK_THROWS_AS(flow_matching_pair(x0, noise, sigma.slice(0, 0, 2)), Error);
}

TEST_CASE("flow matching: settings outside their domain are the user's error", "[diffusion][flow_matching]") {
  FlowMatchingOptions options;
  options.flow_shift = 0.0;
  CHECK_THROWS_AS(FlowMatchingObjective(options), UsageError);
  options = {};
  options.logit_std = 0.0;
  CHECK_THROWS_AS(FlowMatchingObjective(options), UsageError);
  options = {};
  options.num_train_timesteps = 0;
  CHECK_THROWS_AS(FlowMatchingObjective(options), UsageError);
}
