// Single DDPM / DDIM steps (plain, clipped, guided) and seeded loops against the float64 reference; an oracle
// model's DDIM trajectory recovers x_0; the guidance hook sees a pred_xstart that depends on x through the model.
#include "tune/diffusion/sampler.h"
#include "tune/diffusion/schedule.h"

#include "diffusion/fixture.h"
#include "tune/core/error.h"

#include <catch2/catch.hpp>

using namespace tune::diffusion;
namespace fx = tune::test::diffusion;

namespace {

GaussianDiffusion spaced(const std::string& respacing) {
  DiffusionOptions options;
  options.timestep_respacing = respacing;
  return create_diffusion(options);
}

// Returns the fixture's output and checks that the model is asked about the original timesteps.
ModelFn fixed_output_model(const torch::Tensor& output, const torch::Tensor& expected_t, int* calls) {
  return [output, expected_t, calls](const torch::Tensor& x, const torch::Tensor& t) {
    ++*calls;
    CHECK(t.equal(expected_t));
    return output.to(x.scalar_type());
  };
}

// eps = 0.1 x + t / 1000, variance values 0.5 tanh(x): the same stand-in model as the fixture script's.
torch::Tensor toy_model(const torch::Tensor& x, const torch::Tensor& t) {
  const auto tt = t.to(x.scalar_type()).reshape({-1, 1, 1, 1, 1});
  return torch::cat({0.1 * x + tt / 1000.0, 0.5 * torch::tanh(x)}, 2);
}

constexpr double kTolerance = 1e-10;

}  // namespace

TEST_CASE("diffusion sampler: one DDIM step (eta 0 and 0.7) matches the reference on a ddim10 process") {
  const auto& steps = fx::fixture().at("steps");
  const auto diffusion = spaced("ddim10");
  const auto x = fx::tensor(steps.at("x"));
  const auto noise = fx::tensor(steps.at("noise"));
  for (const std::string key : {"ddim_eta0.0", "ddim_eta0.7"}) {
    INFO(key);
    const auto& expected = steps.at(key);
    int calls = 0;
    SamplerOptions options;
    options.eta = expected.at("eta").get<double>();
    const auto model = fixed_output_model(fx::tensor(steps.at("model_output")), fx::longs(expected.at("model_t")), &calls);
    const auto step = ddim_sample(diffusion, model, x, fx::longs(expected.at("t")), noise, options);
    CHECK(calls == 1);
    CHECK(fx::max_abs_difference(step.sample, fx::tensor(expected.at("sample"))) <= kTolerance);
    CHECK(fx::max_abs_difference(step.pred_xstart, fx::tensor(expected.at("pred_xstart"))) <= kTolerance);
  }
}

TEST_CASE("diffusion sampler: one DDPM step (plain and clipped) matches the reference on a 25-step process") {
  const auto& steps = fx::fixture().at("steps");
  const auto diffusion = spaced("25");
  for (const std::string key : {"ddpm", "ddpm_clipped"}) {
    INFO(key);
    const auto& expected = steps.at(key);
    int calls = 0;
    SamplerOptions options;
    options.clip_denoised = expected.at("clip").get<bool>();
    const auto model = fixed_output_model(fx::tensor(steps.at("model_output")), fx::longs(expected.at("model_t")), &calls);
    const auto step = p_sample(diffusion, model, fx::tensor(steps.at("x")), fx::longs(expected.at("t")),
                               fx::tensor(steps.at("noise")), options);
    CHECK(fx::max_abs_difference(step.sample, fx::tensor(expected.at("sample"))) <= kTolerance);
    CHECK(fx::max_abs_difference(step.pred_xstart, fx::tensor(expected.at("pred_xstart"))) <= kTolerance);
  }
}

TEST_CASE("diffusion sampler: guidance gradients shift the DDPM mean by variance * g and the DDIM eps by "
          "-sqrt(1 - alpha_bar) * g") {
  const auto& steps = fx::fixture().at("steps");
  const auto gradient = fx::tensor(steps.at("gradient"));
  const auto output = fx::tensor(steps.at("model_output"));
  const auto model = [&](const torch::Tensor&, const torch::Tensor&) { return output; };
  for (const bool through_model : {true, false}) {
    INFO("guidance_through_model " << through_model);
    SamplerOptions options;
    options.guidance_through_model = through_model;
    torch::Tensor seen_t;
    options.guidance = [&](const torch::Tensor&, const torch::Tensor& t, const torch::Tensor&) {
      seen_t = t;
      return gradient;
    };
    const auto& ddpm = steps.at("ddpm_guided");
    auto step = p_sample(spaced("25"), model, fx::tensor(steps.at("x")), fx::longs(ddpm.at("t")),
                         fx::tensor(steps.at("noise")), options);
    CHECK(seen_t.equal(fx::longs(steps.at("ddpm").at("model_t"))));  // original timesteps, as the model gets
    CHECK(fx::max_abs_difference(step.sample, fx::tensor(ddpm.at("sample"))) <= kTolerance);
    CHECK(!step.sample.requires_grad());

    const auto& ddim = steps.at("ddim_guided");
    options.eta = ddim.at("eta").get<double>();
    step = ddim_sample(spaced("ddim10"), model, fx::tensor(steps.at("x")), fx::longs(ddim.at("t")),
                       fx::tensor(steps.at("noise")), options);
    CHECK(fx::max_abs_difference(step.sample, fx::tensor(ddim.at("sample"))) <= kTolerance);
    CHECK(fx::max_abs_difference(step.pred_xstart, fx::tensor(ddim.at("pred_xstart"))) <= kTolerance);
  }
}

TEST_CASE("diffusion sampler: guidance through the model gives d pred_xstart / d x by autograd") {
  const auto diffusion = spaced("ddim10");
  const auto x = torch::randn({2, 2, 3, 2, 2}, torch::kDouble);
  const auto t = torch::tensor({int64_t{7}, int64_t{3}});
  torch::Tensor autograd_gradient;
  SamplerOptions options;
  options.guidance = [&](const torch::Tensor& x_in, const torch::Tensor&, const torch::Tensor& pred_xstart) {
    CHECK(x_in.requires_grad());
    CHECK(pred_xstart.requires_grad());
    autograd_gradient = torch::autograd::grad({pred_xstart.sum()}, {x_in})[0];
    return torch::zeros_like(x_in);
  };
  torch::NoGradGuard outer_no_grad;  // the sampler turns grad on for the guided step itself
  ddim_sample(diffusion, toy_model, x, t, torch::zeros_like(x), options);
  // pred_xstart = x / sqrt(abar) - sqrt(1 / abar - 1) (0.1 x + t / 1000)
  const auto& tables = diffusion.tables();
  const auto expected = diffusion.extract(tables.sqrt_recip_alphas_cumprod, t, x) -
                        0.1 * diffusion.extract(tables.sqrt_recipm1_alphas_cumprod, t, x);
  REQUIRE(autograd_gradient.defined());
  CHECK(fx::max_abs_difference(autograd_gradient, expected.expand_as(x)) <= 1e-12);
}

TEST_CASE("diffusion sampler: seeded DDPM and DDIM loops reproduce the reference's noise and result") {
  const auto& loops = fx::fixture().at("loops");
  const auto x_T = fx::tensor(loops.at("x_T"));
  for (const std::string kind : {"ddpm", "ddim"}) {
    INFO(kind);
    const auto& expected = loops.at(kind);
    const auto diffusion = spaced(expected.at("spacing").get<std::string>());
    SamplerOptions options;
    int64_t steps_seen = 0;
    options.on_step = [&](int64_t done, int64_t total, int64_t) {
      CHECK(total == 10);
      steps_seen = done;
    };
    auto generator = at::detail::createCPUGenerator(loops.at("seed").get<uint64_t>());
    torch::Tensor sample;
    if (kind == "ddpm") {
      sample = p_sample_loop(diffusion, toy_model, x_T, generator, options);
    } else {
      options.eta = expected.at("eta").get<double>();
      sample = ddim_sample_loop(diffusion, toy_model, x_T, generator, options);
    }
    CHECK(steps_seen == 10);
    CHECK(fx::max_abs_difference(sample, fx::tensor(expected.at("sample"))) <= 1e-9);
    // the same seed gives the same sample
    auto again = at::detail::createCPUGenerator(loops.at("seed").get<uint64_t>());
    const auto repeat = kind == "ddpm" ? p_sample_loop(diffusion, toy_model, x_T, again, options)
                                       : ddim_sample_loop(diffusion, toy_model, x_T, again, options);
    CHECK(repeat.equal(sample));
  }
}

TEST_CASE("diffusion sampler: DDIM with eta 0 over 50 steps and an oracle eps model recovers x_0 within 1e-3") {
  const auto diffusion = spaced("ddim50");
  REQUIRE(diffusion.num_timesteps() == 50);
  auto generator = at::detail::createCPUGenerator(5);
  const auto x0 = torch::rand({2, 3, 4, 4, 4}, generator, torch::kFloat) * 2.0 - 1.0;  // [B, F, C, H, W]
  // The oracle knows x_0: the noise that takes x_0 to x at the (original) timestep t.
  const auto base = ScheduleTables::from_betas(named_beta_schedule("linear", 1000));
  const ModelFn oracle = [&](const torch::Tensor& x, const torch::Tensor& t) {
    const auto abar = base.alphas_cumprod.index_select(0, t).to(x.scalar_type()).reshape({-1, 1, 1, 1, 1});
    const auto eps = (x - abar.sqrt() * x0.to(x.scalar_type())) / (1.0 - abar).sqrt();
    return torch::cat({eps, torch::zeros_like(eps)}, 2);
  };
  const auto x_T = standard_normal(x0.sizes(), generator, torch::TensorOptions().dtype(torch::kFloat));
  SamplerOptions options;  // eta 0, no clipping
  const auto sample = ddim_sample_loop(diffusion, oracle, x_T, generator, options);
  CHECK(sample.scalar_type() == torch::kFloat);
  CHECK(fx::max_abs_difference(sample, x0) <= 1e-3);
}

TEST_CASE("diffusion sampler: bad noise shapes, negative eta and wrong guidance shapes are errors") {
  const auto diffusion = spaced("ddim10");
  const auto x = torch::zeros({1, 1, 3, 2, 2});
  const auto t = torch::tensor({int64_t{3}});
  CHECK_THROWS_AS(ddim_sample(diffusion, toy_model, x, t, torch::zeros({1, 3})), tune::Error);
  SamplerOptions options;
  options.eta = -1.0;
  CHECK_THROWS_AS(ddim_sample(diffusion, toy_model, x, t, x, options), tune::UsageError);
  options.eta = 0.0;
  options.guidance = [](const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { return torch::zeros({2}); };
  CHECK_THROWS_WITH(p_sample(diffusion, toy_model, x, t, x, options), Catch::Contains("guidance gradient"));
}
