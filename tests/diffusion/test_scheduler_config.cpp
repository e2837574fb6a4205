// tune's reading of diffusers' scheduler_config.json and its sampling with DDIMScheduler,
// DPMSolverMultistepScheduler (DDPM and flow sigmas) and FlowMatchEulerDiscreteScheduler semantics, against
// diffusers itself: scripts/make_diffusers_scheduler_fixture.py
// (run by CTest as diffusers_scheduler_fixture_setup into the build tree) records diffusers' tables, timesteps,
// sigmas and whole sampling trajectories of a toy model. Without diffusers the fixture holds SKIPPED and the
// fixture-based cases exit 77 (reported skipped by CTest, never passed); the error cases need no fixture.
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "common/reference_fixture.h"
#include "tune/core/error.h"
#include "tune/diffusion/aspect_ratio_bins.h"
#include "tune/diffusion/scheduler_config.h"
#include "tune/diffusion/scheduler_sampler.h"
#include "tune/io/json_file.h"
#include "tune/io/safetensors.h"

using namespace tune;
using namespace tune::diffusion;
using Catch::Contains;

namespace {

std::filesystem::path fixture_dir() { return test::reference_fixture_dir("diffusers_scheduler_fixture"); }

void skip_without_diffusers() { test::skip_if_fixture_skipped(fixture_dir()); }

struct Fixture {
  nlohmann::json cases;
  io::SafetensorsFile reference;
};

const Fixture& fixture() {
  skip_without_diffusers();
  static const Fixture loaded{io::read_json_file(fixture_dir() / "cases.json"),
                              io::SafetensorsFile::open(fixture_dir() / "reference.safetensors")};
  return loaded;
}

std::filesystem::path config_path(const std::string& name) {
  return fixture_dir() / "configs" / name / "scheduler_config.json";
}

// The fixture's toy predictor, with the script's LibTorch ops in the script's order.
torch::Tensor toy_model(const torch::Tensor& x, const torch::Tensor& t) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[0] = -1;
  return torch::tanh(x) * 0.9 + t.to(x.scalar_type()).reshape(shape) * 1e-4;
}

// max |a - b| / max |b|
double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  return (a64 - b64).abs().max().item<double>() / b64.abs().max().item<double>();
}

struct Run {
  torch::Tensor trajectory;         // [steps + 1, ...]: the model's input at each step, then the result
  std::vector<int64_t> reported;    // on_step's timesteps
  std::vector<torch::Tensor> model_timesteps;  // what the model was called with, [B] each
};

Run sample(const SchedulerConfig& config, int64_t steps, const torch::Tensor& x_T, SamplerOptions options = {},
           uint64_t seed = 0) {
  Run run;
  std::vector<torch::Tensor> states;
  const ModelFn model = [&](const torch::Tensor& x, const torch::Tensor& t) {
    states.push_back(x.detach().clone());
    run.model_timesteps.push_back(t.clone());
    return toy_model(x, t);
  };
  options.on_step = [&](int64_t, int64_t, int64_t timestep) { run.reported.push_back(timestep); };
  states.push_back(sample_with_scheduler(config, steps, model, x_T, at::detail::createCPUGenerator(seed), options));
  // the result was pushed last but computed after every model call
  run.trajectory = torch::stack(states);
  return run;
}

std::vector<int64_t> longs(const torch::Tensor& tensor) {
  const auto values = tensor.to(torch::kLong).contiguous();
  return {values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + values.numel()};
}

std::string input_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("expected tune::InputError");
  return {};
}

std::string usage_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const UsageError& error) {
    return error.what();
  }
  FAIL("expected tune::UsageError");
  return {};
}

}  // namespace

TEST_CASE("scheduler tables are diffusers' float32 tables bit for bit", "[diffusion][scheduler]") {
  const auto& data = fixture();
  for (const auto& entry : data.cases.at("cases")) {
    const auto name = entry.at("name").get<std::string>();
    INFO(name);
    const auto config = read_scheduler_config(config_path(name));
    CHECK(config.class_name == entry.at("class_name").get<std::string>());
    if (config.kind == SchedulerKind::flow_match_euler) continue;  // no DDPM process
    const auto betas = torch::tensor(scheduler_betas(config), torch::kDouble).to(torch::kFloat);
    const auto alphas_cumprod = torch::tensor(scheduler_alphas_cumprod(config), torch::kDouble).to(torch::kFloat);
    CHECK(torch::equal(betas, data.reference.load(name + "/betas")));
    CHECK(torch::equal(alphas_cumprod, data.reference.load(name + "/alphas_cumprod")));
  }
}

TEST_CASE("scheduler timesteps and sigmas equal diffusers' set_timesteps", "[diffusion][scheduler]") {
  const auto& data = fixture();
  double worst_flow_timestep = 0, worst_flow_sigma = 0;  // relative, the flow cases
  int flow_tables = 0;
  for (const auto& entry : data.cases.at("cases")) {
    const auto name = entry.at("name").get<std::string>();
    const auto config = read_scheduler_config(config_path(name));
    for (int64_t steps : entry.at("timestep_counts").get<std::vector<int64_t>>()) {
      INFO(name << ", " << steps << " steps");
      const auto expected = data.reference.load(fmt::format("{}/timesteps/{}", name, steps));
      const auto timesteps = scheduler_model_timesteps(config, steps);
      // int64 (truncated or rounded timesteps) for DDIM and DPM-Solver, float32 for FlowMatchEuler, as diffusers
      CHECK(timesteps.scalar_type() == expected.scalar_type());
      if (config.kind != SchedulerKind::flow_match_euler) {
        CHECK(scheduler_timesteps(config, steps) == longs(expected));
      }
      if (config.kind == SchedulerKind::ddim) {
        CHECK(torch::equal(timesteps, expected));
        continue;
      }
      const auto sigmas = torch::tensor(scheduler_sigmas(config, steps), torch::kDouble).to(torch::kFloat);
      const auto expected_sigmas = data.reference.load(fmt::format("{}/sigmas/{}", name, steps));
      REQUIRE(sigmas.sizes() == expected_sigmas.sizes());
      if (!config.flow()) {
        CHECK(torch::equal(timesteps, expected));
        CHECK(torch::equal(sigmas, expected_sigmas));
        continue;
      }
      // flow sigmas: numpy's float64 arithmetic redone in double, so bit-equal is expected; 1e-6 is the bound
      const double timestep_difference = relative_difference(timesteps, expected);
      const double sigma_difference = relative_difference(sigmas, expected_sigmas);
      CHECK(timestep_difference <= 1e-6);
      CHECK(sigma_difference <= 1e-6);
      worst_flow_timestep = std::max(worst_flow_timestep, timestep_difference);
      worst_flow_sigma = std::max(worst_flow_sigma, sigma_difference);
      ++flow_tables;
    }
  }
  CHECK(flow_tables == 5 * 9);
  std::cout << fmt::format("flow schedules ({} tables): largest relative difference to diffusers {:.2e} "
                           "(timesteps), {:.2e} (sigmas)\n",
                           flow_tables, worst_flow_timestep, worst_flow_sigma);
}

TEST_CASE("sampling trajectories match diffusers' DDIM, DPM-Solver++ and flow-matching loops",
          "[diffusion][scheduler]") {
  const auto& data = fixture();
  const auto x_T = data.reference.load("x_T");
  double worst_ddim[2] = {0, 0}, worst_dpm[2] = {0, 0}, worst_flow_dpm[2] = {0, 0}, worst_flow_euler[2] = {0, 0};
  for (const auto& entry : data.cases.at("cases")) {
    const auto name = entry.at("name").get<std::string>();
    const auto config = read_scheduler_config(config_path(name));
    for (int64_t steps : entry.at("trajectory_counts").get<std::vector<int64_t>>()) {
      for (int precision = 0; precision < 2; ++precision) {
        const auto dtype = precision == 0 ? torch::kDouble : torch::kFloat;
        INFO(name << ", " << steps << " steps, " << (precision == 0 ? "float64" : "float32"));
        const auto expected = data.reference.load(
            fmt::format("{}/trajectory/{}/{}", name, steps, precision == 0 ? "float64" : "float32"));
        const auto run = sample(config, steps, x_T.to(dtype));
        REQUIRE(run.trajectory.sizes() == expected.sizes());
        CHECK(run.trajectory.scalar_type() == dtype);
        // the model sees diffusers' timesteps, in diffusers' dtype, for every sample of the batch
        const auto expected_timesteps = data.reference.load(fmt::format("{}/timesteps/{}", name, steps));
        REQUIRE(run.model_timesteps.size() == static_cast<size_t>(steps));
        for (int64_t i = 0; i < steps; ++i) {
          const auto& seen = run.model_timesteps[static_cast<size_t>(i)];
          CHECK(seen.scalar_type() == expected_timesteps.scalar_type());
          CHECK(torch::equal(seen, expected_timesteps[i].expand({x_T.size(0)})));
        }
        CHECK(run.reported == longs(expected_timesteps.to(torch::kDouble).round()));
        const double difference = relative_difference(run.trajectory, expected);
        // float64: diffusers computes its per-step coefficients (and DPM-Solver its sample) in float32
        CHECK(difference < (precision == 0 ? 1e-5 : 2e-5));
        auto& worst = config.kind == SchedulerKind::ddim               ? worst_ddim[precision]
                      : config.kind == SchedulerKind::flow_match_euler ? worst_flow_euler[precision]
                      : config.use_flow_sigmas                         ? worst_flow_dpm[precision]
                                                                       : worst_dpm[precision];
        worst = std::max(worst, difference);
      }
    }
  }
  std::cout << fmt::format("largest relative trajectory difference to diffusers: DDIM {:.2e} (float64), {:.2e} "
                           "(float32); DPM-Solver++ {:.2e} (float64), {:.2e} (float32); DPM-Solver++ on flow "
                           "sigmas {:.2e} (float64), {:.2e} (float32); FlowMatchEuler {:.2e} (float64), {:.2e} "
                           "(float32)\n",
                           worst_ddim[0], worst_ddim[1], worst_dpm[0], worst_dpm[1], worst_flow_dpm[0],
                           worst_flow_dpm[1], worst_flow_euler[0], worst_flow_euler[1]);
}

TEST_CASE("DDIM with eta 1 draws diffusers' noise from the same generator", "[diffusion][scheduler]") {
  const auto& data = fixture();
  const auto x_T = data.reference.load("x_T");
  const auto seed = data.cases.at("eta_one_seed").get<uint64_t>();
  int checked = 0;
  for (const auto& entry : data.cases.at("cases")) {
    const auto name = entry.at("name").get<std::string>();
    for (int64_t steps : entry.at("eta_one_counts").get<std::vector<int64_t>>()) {
      INFO(name << ", " << steps << " steps");
      SamplerOptions options;
      options.eta = 1.0;
      const auto run = sample(read_scheduler_config(config_path(name)), steps, x_T, options, seed);
      const auto expected = data.reference.load(fmt::format("{}/eta_one/{}", name, steps));
      const double difference = relative_difference(run.trajectory, expected);
      std::cout << fmt::format("{} eta 1, {} steps: relative difference {:.2e}\n", name, steps, difference);
      CHECK(difference < 1e-5);
      ++checked;
    }
  }
  CHECK(checked == 2);
}

TEST_CASE("DDIM sampling keeps gradient guidance working", "[diffusion][scheduler]") {
  const auto& data = fixture();
  const auto config = read_scheduler_config(config_path("latte1_ddim"));
  const auto x_T = data.reference.load("x_T");
  SamplerOptions zero_guidance;
  int64_t calls = 0;
  zero_guidance.guidance = [&](const torch::Tensor& x, const torch::Tensor&, const torch::Tensor& pred_xstart) {
    // through the model: pred_xstart depends on x
    const auto gradient = torch::autograd::grad({pred_xstart.sum()}, {x})[0];
    CHECK(gradient.abs().sum().item<double>() > 0.0);
    ++calls;
    return torch::zeros_like(x);
  };
  const auto guided = sample(config, 7, x_T, zero_guidance).trajectory;
  const auto plain = sample(config, 7, x_T).trajectory;
  CHECK(calls == 7);
  CHECK(relative_difference(guided, plain) < 1e-12);
  CHECK(scheduler_diffusion(config, 7).timestep_map() == std::vector<int64_t>{0, 142, 284, 426, 568, 710, 852});
}

TEST_CASE("scheduler configs: what tune refuses names the file and the key", "[diffusion][scheduler]") {
  tune::testing::ScratchDir dir;
  const std::string ddim = R"("_class_name": "DDIMScheduler", "clip_sample": false)";
  const std::string dpm = R"("_class_name": "DPMSolverMultistepScheduler")";
  const std::string flow = R"(, "use_flow_sigmas": true, "prediction_type": "flow_prediction")";
  const std::string euler = R"("_class_name": "FlowMatchEulerDiscreteScheduler")";
  struct Refusal {
    std::string body, key, reason;
  };
  const std::vector<Refusal> refusals = {
      {R"("_class_name": "EulerDiscreteScheduler")", "_class_name", "not implemented yet"},
      {R"("beta_start": 0.0001)", "_class_name", "missing"},
      {ddim + R"(, "foo": 1)", "foo", "not a setting"},
      {R"("_class_name": "DDIMScheduler")", "clip_sample", "key is absent"},
      {ddim + R"(, "thresholding": true)", "thresholding", "does not implement"},
      {ddim + R"(, "rescale_betas_zero_snr": true)", "rescale_betas_zero_snr", "does not implement"},
      {ddim + R"(, "prediction_type": "flow_prediction")", "prediction_type", "flow_prediction"},
      {ddim + R"(, "timestep_spacing": "uniform")", "timestep_spacing", "uniform"},
      {ddim + R"(, "beta_schedule": "sigmoid")", "beta_schedule", "sigmoid"},
      {ddim + R"(, "steps_offset": "1")", "steps_offset", "must be an integer"},
      {ddim + R"(, "num_train_timesteps": 3, "trained_betas": [0.1, 0.2])", "trained_betas", "holds 2 betas"},
      {ddim + R"(, "variance_type": "wide")", "variance_type", "wide"},
      {dpm + R"(, "use_karras_sigmas": true)", "use_karras_sigmas", "does not implement"},
      {dpm + R"(, "solver_order": 3)", "solver_order", "3"},
      {dpm + R"(, "algorithm_type": "sde-dpmsolver++")", "algorithm_type", "sde-dpmsolver++"},
      {dpm + R"(, "solver_type": "logrho")", "solver_type", "logrho"},
      {dpm + R"(, "final_sigmas_type": "denoise_to_zero")", "final_sigmas_type", "denoise_to_zero"},
      // flow sigmas: only with a flow prediction, and the reverse; no dynamic shifting or other sigma schedules
      {dpm + R"(, "use_flow_sigmas": true)", "prediction_type", "\"epsilon\" with use_flow_sigmas true"},
      {dpm + R"(, "use_flow_sigmas": true, "prediction_type": "v_prediction")", "prediction_type", "v_prediction"},
      {dpm + R"(, "prediction_type": "flow_prediction")", "use_flow_sigmas", "is false"},
      {dpm + flow + R"(, "use_dynamic_shifting": true)", "use_dynamic_shifting", "does not implement"},
      {dpm + flow + R"(, "use_karras_sigmas": true)", "use_karras_sigmas", "does not implement"},
      {dpm + flow + R"(, "use_exponential_sigmas": true)", "use_exponential_sigmas", "does not implement"},
      {dpm + flow + R"(, "use_beta_sigmas": true)", "use_beta_sigmas", "does not implement"},
      {dpm + flow + R"(, "time_shift_type": "linear")", "time_shift_type", "linear"},
      {dpm + flow + R"(, "flow_shift": 0)", "flow_shift", "must be a number > 0"},
      {dpm + flow + R"(, "flow_shift": "3")", "flow_shift", "must be a number"},
      {ddim + R"(, "prediction_type": "flow_prediction", "use_flow_sigmas": true)", "prediction_type",
       "flow_prediction"},
      // FlowMatchEulerDiscreteScheduler
      {euler + R"(, "use_dynamic_shifting": true)", "use_dynamic_shifting", "does not implement"},
      {euler + R"(, "use_karras_sigmas": true)", "use_karras_sigmas", "does not implement"},
      {euler + R"(, "use_exponential_sigmas": true)", "use_exponential_sigmas", "does not implement"},
      {euler + R"(, "use_beta_sigmas": true)", "use_beta_sigmas", "does not implement"},
      {euler + R"(, "stochastic_sampling": true)", "stochastic_sampling", "does not implement"},
      {euler + R"(, "invert_sigmas": true)", "invert_sigmas", "does not implement"},
      {euler + R"(, "shift_terminal": 0.1)", "shift_terminal", "0.1"},
      {euler + R"(, "shift": -1.0)", "shift", "must be a number > 0"},
      {euler + R"(, "time_shift_type": "cubic")", "time_shift_type", "cubic"},
      {euler + R"(, "flow_shift": 3.0)", "flow_shift", "reads its shift from 'shift'"},
      {euler + R"(, "shift_scale": 3.0)", "shift_scale", "not a setting"},
  };
  for (size_t i = 0; i < refusals.size(); ++i) {
    const auto& refusal = refusals[i];
    INFO(refusal.body);
    const auto path = dir.write(fmt::format("case{}/scheduler_config.json", i), "{" + refusal.body + "}");
    CHECK_THAT(input_error([&] { read_scheduler_config(path); }),
               Contains(path.string()) && Contains("'" + refusal.key + "'") && Contains(refusal.reason));
  }

  SECTION("missing and malformed files") {
    CHECK_THAT(input_error([&] { read_scheduler_config(dir / "absent.json"); }), Contains("absent.json"));
    const auto broken = dir.write("broken/scheduler_config.json", R"({"_class_name": )");
    CHECK_THAT(input_error([&] { read_scheduler_config(broken); }),
               Contains(broken.string()) && Contains("invalid JSON"));
  }
  SECTION("a beta outside (0, 1) names the key that made it") {
    const auto path = dir.write("beta/scheduler_config.json", "{" + ddim + R"(, "beta_end": 1.5})");
    const auto config = read_scheduler_config(path);
    CHECK_THAT(input_error([&] { scheduler_betas(config); }), Contains(path.string()) && Contains("'beta_end'"));
  }
  SECTION("a step count outside [1, num_train_timesteps] is the user's error") {
    const auto config = read_scheduler_config(dir.write("steps/scheduler_config.json", "{" + ddim + "}"));
    CHECK_THAT(usage_error([&] { scheduler_timesteps(config, 0); }), Contains("sampling steps"));
    CHECK_THAT(usage_error([&] { scheduler_timesteps(config, 1001); }), Contains("1001"));
  }
  SECTION("DPM-Solver refuses what only the DDIM sampler implements") {
    const auto config = read_scheduler_config(dir.write("dpm/scheduler_config.json", "{" + dpm + "}"));
    SamplerOptions options;
    options.guidance = [](const torch::Tensor& x, const torch::Tensor&, const torch::Tensor&) { return x; };
    const auto x = torch::zeros({1, 2});
    CHECK_THAT(usage_error([&] {
                 sample_with_scheduler(config, 3, toy_model, x, at::detail::createCPUGenerator(0), options);
               }),
               Contains("gradient guidance") && Contains("DPMSolverMultistepScheduler"));
    CHECK_THAT(usage_error([&] { scheduler_diffusion(config, 3); }), Contains("DDIMScheduler"));
  }
  SECTION("FlowMatchEuler: float timesteps, no DDIM process, no guidance in the loop") {
    const auto config = read_scheduler_config(dir.write("euler/scheduler_config.json", "{" + euler + "}"));
    CHECK_THAT(usage_error([&] { scheduler_timesteps(config, 3); }), Contains("scheduler_model_timesteps"));
    CHECK_THAT(usage_error([&] { scheduler_model_timesteps(config, 1001); }), Contains("1001"));
    CHECK_THAT(usage_error([&] { scheduler_diffusion(config, 3); }), Contains("DDIMScheduler"));
    SamplerOptions options;
    options.eta = 1.0;
    CHECK_THAT(usage_error([&] {
                 sample_with_scheduler(config, 3, toy_model, torch::zeros({1, 2}), at::detail::createCPUGenerator(0),
                                       options);
               }),
               Contains("eta") && Contains("flow-matching Euler"));
  }
}

TEST_CASE("scheduler configs: keys of other diffusers schedulers are accepted, as diffusers does",
          "[diffusion][scheduler]") {
  tune::testing::ScratchDir dir;
  // A DDIM config that was a DPM-Solver one (Latte-1's history) carries DPM keys, and Python's -Infinity.
  const auto path = dir.write("scheduler_config.json", R"({
    "_class_name": "DDIMScheduler", "_diffusers_version": "0.30.0.dev0", "_name_or_path": "maxin-cn/Latte-1",
    "clip_sample": false, "variance_type": "learned_range", "solver_order": 2, "algorithm_type": "dpmsolver++",
    "lambda_min_clipped": -Infinity, "use_karras_sigmas": true, "skip_prk_steps": true, "trained_betas": null})");
  const auto config = read_scheduler_config(path);
  CHECK(config.kind == SchedulerKind::ddim);
  CHECK(config.variance_type == "learned_range");
  CHECK(config.learned_variance());
  CHECK(config.timestep_spacing == "leading");
  CHECK(config.source == path);

  const auto dpm = read_scheduler_config(dir.write("dpm/scheduler_config.json", R"({
    "_class_name": "DPMSolverMultistepScheduler", "lambda_min_clipped": -Infinity, "clip_sample": true,
    "set_alpha_to_one": false})"));
  CHECK(dpm.kind == SchedulerKind::dpm_solver_multistep);
  CHECK(dpm.timestep_spacing == "linspace");
  CHECK(std::isinf(dpm.lambda_min_clipped));
  CHECK_FALSE(dpm.learned_variance());
  CHECK_FALSE(dpm.flow());

  // A FlowMatchEuler file may carry DDPM keys (hidden, without effect); a flow_shift equal to its shift is harmless.
  const auto euler = read_scheduler_config(dir.write("euler/scheduler_config.json", R"({
    "_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0, "flow_shift": 3.0, "beta_start": 0.5,
    "prediction_type": "epsilon", "shift_terminal": null, "time_shift_type": "linear"})"));
  CHECK(euler.kind == SchedulerKind::flow_match_euler);
  CHECK(euler.flow_shift == 3.0);
  CHECK(euler.prediction_type == "flow_prediction");
  CHECK(euler.flow());
}

TEST_CASE("SchedulerStepper: a step at a time, as sample_with_scheduler, with the x_0 prediction differentiable",
          "[diffusion][scheduler]") {
  const auto& data = fixture();
  const auto x_T = data.reference.load("x_T");
  for (const std::string name : {"dpm_flow_sana", "flow_euler_shift3", "dpm_latte1_earlier"}) {
    INFO(name);
    const auto config = read_scheduler_config(config_path(name));
    const auto expected = data.reference.load(fmt::format("{}/trajectory/7/float64", name));
    SchedulerStepper stepper(config, 7);
    REQUIRE(stepper.num_steps() == 7);
    CHECK(torch::equal(stepper.timesteps(), data.reference.load(fmt::format("{}/timesteps/7", name))));
    CHECK(stepper.sigma(7) == 0.0);
    auto x = x_T.clone();
    for (int64_t i = 0; i < stepper.num_steps(); ++i) {
      CHECK(relative_difference(x, expected[i]) < 1e-5);
      // the caller's model, run with autograd so that guidance can differentiate the x_0 prediction
      const auto leaf = x.detach().requires_grad_(true);
      const auto output = toy_model(leaf, stepper.model_timesteps(i, leaf.size(0), leaf.device()));
      const auto result = stepper.step(i, leaf, output);
      CHECK_FALSE(result.sample.requires_grad());
      if (config.flow()) {
        // x_0 = x - sigma v, so d(sum x_0)/dx = 1 - sigma 0.9 (1 - tanh(x)^2) for the toy model
        const double sigma = stepper.sigma(i);
        CHECK(relative_difference(result.predicted_x0, leaf - sigma * output) < 1e-15);
        const auto gradient = torch::autograd::grad({result.predicted_x0.sum()}, {leaf})[0];
        const auto formula = 1.0 - sigma * 0.9 * (1.0 - torch::tanh(x).pow(2));
        CHECK(relative_difference(gradient, formula) < 1e-12);
      }
      x = result.sample;
    }
    CHECK(relative_difference(x, expected[7]) < 1e-5);
    CHECK_THROWS_AS(stepper.step(7, x, x), Error);
  }
  SECTION("steps out of order, a wrong output shape, a DDIM config") {
    SchedulerStepper stepper(read_scheduler_config(config_path("flow_euler_shift1")), 3);
    CHECK_THROWS_AS(stepper.step(1, x_T, x_T), Error);
    CHECK_THROWS_AS(stepper.step(0, x_T, x_T[0]), Error);
    CHECK_THROWS_AS(SchedulerStepper(read_scheduler_config(config_path("latte1_ddim")), 3), UsageError);
  }
}

TEST_CASE("resolution binning picks diffusers' bin for every table and resizes back as resize_and_crop_tensor",
          "[diffusion][binning]") {
  const auto& bins = fixture().cases.at("aspect_ratio_bins");
  size_t checked = 0;
  for (const auto& item : bins.at("bins")) {
    const auto bin = aspect_ratio_bin(item.at("sample_size").get<int64_t>(), item.at("height").get<int64_t>(),
                                      item.at("width").get<int64_t>());
    REQUIRE(bin.has_value());
    INFO("sample_size " << item.at("sample_size") << ", " << item.at("height") << " x " << item.at("width"));
    CHECK(bin->height == item.at("bin")[0].get<int64_t>());
    CHECK(bin->width == item.at("bin")[1].get<int64_t>());
    ++checked;
  }
  CHECK(checked > 1000);
  CHECK_FALSE(aspect_ratio_bin(8, 64, 64).has_value());  // SanaPipeline: "Invalid sample size"
  for (const auto& item : bins.at("resizes")) {
    const auto index = item.at("index").get<int>();
    const auto input = fixture().reference.load(fmt::format("resize/{}/in", index));
    const auto expected = fixture().reference.load(fmt::format("resize/{}/out", index));
    const auto ours = resize_and_crop(input, item.at("height").get<int64_t>(), item.at("width").get<int64_t>());
    REQUIRE(ours.sizes() == expected.sizes());
    CHECK((ours - expected).abs().max().item<float>() <= 1e-6f);
  }
}
