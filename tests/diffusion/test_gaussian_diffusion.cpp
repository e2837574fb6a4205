// q_sample, the posterior, p_mean_variance for each variance type and the hybrid training loss against the
// float64 reference; the frozen-mean trick checked through gradients; seeded uniform timesteps.
#include "tune/diffusion/gaussian_diffusion.h"
#include "tune/diffusion/distributions.h"
#include "tune/diffusion/timestep_sampler.h"

#include "diffusion/fixture.h"
#include "tune/core/error.h"

#include <catch2/catch.hpp>

using namespace tune::diffusion;
namespace fx = tune::test::diffusion;

namespace {

GaussianDiffusion make(ModelVarType var_type, const std::string& respacing = "",
                       LossType loss_type = LossType::Mse) {
  DiffusionOptions options;
  options.timestep_respacing = respacing;
  options.process.var_type = var_type;
  options.process.loss_type = loss_type;
  return create_diffusion(options);
}

// float64 inputs: agreement to rounding. The largest coefficient, 1/sqrt(alpha_bar_999) ~ 156, bounds the growth.
constexpr double kTolerance = 1e-10;

}  // namespace

TEST_CASE("diffusion process: q_sample, q_posterior_mean_variance and predict_xstart_from_eps match the reference") {
  const auto& p = fx::fixture().at("process");
  const auto diffusion = make(ModelVarType::LearnedRange);
  const auto t = fx::longs(p.at("t"));
  const auto x0 = fx::tensor(p.at("x_start"));
  const auto x_t = diffusion.q_sample(x0, t, fx::tensor(p.at("noise")));
  CHECK(x_t.scalar_type() == torch::kDouble);
  CHECK(fx::max_abs_difference(x_t, fx::tensor(p.at("x_t"))) <= kTolerance);
  const auto posterior = diffusion.q_posterior_mean_variance(x0, fx::tensor(p.at("x_t")), t);
  CHECK(fx::max_abs_difference(posterior.mean, fx::tensor(p.at("posterior_mean"))) <= kTolerance);
  CHECK(fx::max_abs_difference(posterior.variance, fx::tensor(p.at("posterior_variance"))) <= 1e-15);
  CHECK(fx::max_abs_difference(posterior.log_variance, fx::tensor(p.at("posterior_log_variance"))) <= kTolerance);
  const auto eps = fx::tensor(p.at("model_output")).narrow(2, 0, 3);
  CHECK(fx::max_abs_difference(diffusion.predict_xstart_from_eps(fx::tensor(p.at("x_t")), t, eps),
                               fx::tensor(p.at("pred_xstart_from_eps"))) <= kTolerance);
  // eps <-> x_0 round trip
  const auto back = diffusion.predict_eps_from_xstart(fx::tensor(p.at("x_t")), t, fx::tensor(p.at("pred_xstart_from_eps")));
  CHECK(fx::max_abs_difference(back, eps) <= 1e-9);
}

TEST_CASE("diffusion process: float32 inputs are computed in float32 within 1e-5 relative of the reference") {
  const auto& p = fx::fixture().at("process");
  const auto diffusion = make(ModelVarType::LearnedRange);
  const auto t = fx::longs(p.at("t"));
  const auto x_t = diffusion.q_sample(fx::tensor(p.at("x_start"), torch::kFloat), t, fx::tensor(p.at("noise"), torch::kFloat));
  CHECK(x_t.scalar_type() == torch::kFloat);
  CHECK(fx::max_abs_difference(x_t, fx::tensor(p.at("x_t"))) <= 1e-6);
  const auto out = diffusion.p_mean_variance(fx::tensor(p.at("model_output"), torch::kBFloat16).to(torch::kFloat),
                                             fx::tensor(p.at("x_t"), torch::kFloat), t, false);
  CHECK(out.mean.scalar_type() == torch::kFloat);
}

TEST_CASE("diffusion process: p_mean_variance for learned-range, fixed-small and fixed-large variances") {
  const auto& p = fx::fixture().at("process");
  const auto t = fx::longs(p.at("t"));
  const auto x_t = fx::tensor(p.at("x_t"));
  const auto output = fx::tensor(p.at("model_output"));
  struct Case {
    std::string label;
    ModelVarType var_type;
    bool clip;
    torch::Tensor output;
  };
  const std::vector<Case> cases = {{"learned_range", ModelVarType::LearnedRange, false, output},
                                   {"learned_range_clipped", ModelVarType::LearnedRange, true, output},
                                   {"fixed_small", ModelVarType::FixedSmall, false, output.narrow(2, 0, 3)},
                                   {"fixed_large", ModelVarType::FixedLarge, false, output.narrow(2, 0, 3)}};
  for (const auto& c : cases) {
    INFO(c.label);
    const auto& expected = p.at("p_mean_variance_" + c.label);
    const auto out = make(c.var_type).p_mean_variance(c.output, x_t, t, c.clip);
    CHECK(out.mean.sizes() == x_t.sizes());
    CHECK(out.log_variance.sizes() == x_t.sizes());
    CHECK(fx::max_abs_difference(out.mean, fx::tensor(expected.at("mean"))) <= kTolerance);
    CHECK(fx::max_abs_difference(out.pred_xstart, fx::tensor(expected.at("pred_xstart"))) <= kTolerance);
    CHECK(fx::max_abs_difference(out.log_variance, fx::tensor(expected.at("log_variance"))) <= kTolerance);
    CHECK(fx::max_relative_difference(out.variance, fx::tensor(expected.at("variance")), 1e-300) <= 1e-12);
  }
  // the model callback receives x and the original timesteps
  const auto diffusion = make(ModelVarType::LearnedRange);
  bool called = false;
  const auto via_model = diffusion.p_mean_variance(
      [&](const torch::Tensor& x, const torch::Tensor& tt) {
        called = true;
        CHECK(tt.equal(t));
        CHECK(x.equal(x_t));
        return output;
      },
      x_t, t, false);
  CHECK(called);
  CHECK(via_model.mean.equal(diffusion.p_mean_variance(output, x_t, t, false).mean));
}

TEST_CASE("diffusion process: wrong shapes and timesteps are errors that give the shapes") {
  const auto diffusion = make(ModelVarType::LearnedRange);
  const auto x = torch::zeros({2, 2, 3, 2, 2}, torch::kDouble);
  const auto t = torch::tensor({int64_t{0}, int64_t{5}});
  CHECK_THROWS_WITH(diffusion.p_mean_variance(torch::zeros({2, 2, 3, 2, 2}), x, t, false), Catch::Contains("2x2x6x2x2"));
  CHECK_THROWS_AS(diffusion.q_sample(x, torch::tensor({int64_t{0}, int64_t{1000}}), x), tune::Error);
  CHECK_THROWS_AS(diffusion.q_sample(x, torch::tensor({int64_t{0}}), x), tune::Error);
  CHECK_THROWS_AS(diffusion.q_sample(x, t, torch::zeros({2, 3})), tune::Error);
}

TEST_CASE("diffusion loss: hybrid MSE + VB terms match the reference, with the decoder NLL at t = 0") {
  const auto& p = fx::fixture().at("process");
  const auto& expected = fx::fixture().at("loss");
  const auto diffusion = make(ModelVarType::LearnedRange);
  const auto t = fx::longs(p.at("t"));
  REQUIRE(t[0].item<int64_t>() == 0);
  const auto output = fx::tensor(p.at("model_output"));
  const auto terms = diffusion.training_losses([&](const torch::Tensor&, const torch::Tensor&) { return output; },
                                               fx::tensor(p.at("x_start")), t, fx::tensor(p.at("noise")));
  CHECK(terms.loss.sizes() == torch::IntArrayRef{4});
  CHECK(fx::max_relative_difference(terms.mse, fx::tensor(expected.at("mse"))) <= 1e-12);
  CHECK(fx::max_relative_difference(terms.vb, fx::tensor(expected.at("vb"))) <= 1e-9);
  CHECK(fx::max_relative_difference(terms.loss, fx::tensor(expected.at("loss"))) <= 1e-9);
  // t = 0 takes the decoder NLL, the others the KL
  CHECK(terms.vb[0].item<double>() == Approx(fx::tensor(expected.at("decoder_nll"))[0].item<double>()).epsilon(1e-9));
  CHECK(terms.vb[2].item<double>() == Approx(fx::tensor(expected.at("kl"))[2].item<double>()).epsilon(1e-9));
  // Kl loss type: the VB term of the whole output alone (same value here, the output is the same)
  const auto kl_terms = make(ModelVarType::LearnedRange, "", LossType::Kl)
                            .training_losses([&](const torch::Tensor&, const torch::Tensor&) { return output; },
                                             fx::tensor(p.at("x_start")), t, fx::tensor(p.at("noise")));
  CHECK(!kl_terms.mse.defined());
  CHECK(fx::max_relative_difference(kl_terms.loss, fx::tensor(expected.at("vb"))) <= 1e-9);
}

TEST_CASE("diffusion loss: RescaledMse on a 25-step process scales VB by 25 / 1000; Mse does not") {
  const auto& p = fx::fixture().at("process");
  const auto& expected = fx::fixture().at("loss_spaced25_rescaled");
  const auto t = fx::longs(expected.at("t"));
  const auto output = fx::tensor(p.at("model_output"));
  const auto model = [&](const torch::Tensor&, const torch::Tensor&) { return output; };
  const auto rescaled = make(ModelVarType::LearnedRange, "25", LossType::RescaledMse)
                            .training_losses(model, fx::tensor(p.at("x_start")), t, fx::tensor(p.at("noise")));
  CHECK(fx::max_relative_difference(rescaled.mse, fx::tensor(expected.at("mse"))) <= 1e-12);
  CHECK(fx::max_relative_difference(rescaled.vb, fx::tensor(expected.at("vb"))) <= 1e-9);
  CHECK(fx::max_relative_difference(rescaled.loss, fx::tensor(expected.at("loss"))) <= 1e-9);
  const auto plain = make(ModelVarType::LearnedRange, "25", LossType::Mse)
                         .training_losses(model, fx::tensor(p.at("x_start")), t, fx::tensor(p.at("noise")));
  CHECK(fx::max_relative_difference(plain.vb * (25.0 / 1000.0), rescaled.vb) <= 1e-12);
}

TEST_CASE("diffusion loss: the VB term trains only the variance channels, the MSE only the eps channels") {
  const auto& p = fx::fixture().at("process");
  const auto diffusion = make(ModelVarType::LearnedRange);
  const auto t = fx::longs(p.at("t"));
  auto output = fx::tensor(p.at("model_output")).requires_grad_(true);
  const auto model = [&](const torch::Tensor&, const torch::Tensor&) { return output * 1.0; };
  const auto x0 = fx::tensor(p.at("x_start"));
  const auto noise = fx::tensor(p.at("noise"));

  auto terms = diffusion.training_losses(model, x0, t, noise);
  auto vb_grad = torch::autograd::grad({terms.vb.sum()}, {output})[0];
  CHECK(vb_grad.narrow(2, 0, 3).abs().max().item<double>() == 0.0);
  CHECK(vb_grad.narrow(2, 3, 3).abs().max().item<double>() > 0.0);

  terms = diffusion.training_losses(model, x0, t, noise);
  auto mse_grad = torch::autograd::grad({terms.mse.sum()}, {output})[0];
  CHECK(mse_grad.narrow(2, 3, 3).abs().max().item<double>() == 0.0);
  // d mean((noise - eps)^2) / d eps = -2 (noise - eps) / numel per sample
  const auto eps = fx::tensor(p.at("model_output")).narrow(2, 0, 3);
  CHECK(fx::max_abs_difference(mse_grad.narrow(2, 0, 3), -2.0 * (noise - eps) / 24.0) <= 1e-15);
}

TEST_CASE("diffusion distributions: KL of equal Gaussians is 0; the decoder likelihood uses the edge bins") {
  const auto m = torch::randn({5}, torch::kDouble);
  const auto lv = torch::randn({5}, torch::kDouble);
  CHECK(normal_kl(m, lv, m, lv).abs().max().item<double>() <= 1e-15);
  // a very narrow Gaussian centred on the bin puts (almost) all mass in it: log P ~ 0 in every branch
  const auto x = torch::tensor({-1.0, 0.2, 1.0}, torch::kDouble);
  const auto log_p = discretized_gaussian_log_likelihood(x, x, torch::full({3}, -12.0, torch::kDouble));
  CHECK(log_p.abs().max().item<double>() <= 1e-9);
  CHECK(approx_standard_normal_cdf(torch::zeros({1}, torch::kDouble)).item<double>() == 0.5);
}

TEST_CASE("diffusion timesteps: uniform draws match torch.randint with the same seeded generator") {
  const auto& expected = fx::fixture().at("timestep_sampler");
  auto generator = at::detail::createCPUGenerator(expected.at("seed").get<uint64_t>());
  const UniformTimestepSampler sampler(expected.at("num_timesteps").get<int64_t>());
  const auto draw = sampler.sample(expected.at("batch").get<int64_t>(), generator);
  CHECK(draw.timesteps.scalar_type() == torch::kLong);
  CHECK(draw.timesteps.equal(fx::longs(expected.at("t"))));
  CHECK(draw.weights.equal(torch::ones({8})));
  CHECK_THROWS_AS(UniformTimestepSampler(0), tune::UsageError);
}
