// tune's reading of diffusers' scheduler_config.json and its sampling with DDIMScheduler and
// DPMSolverMultistepScheduler semantics, against diffusers itself: scripts/make_diffusers_scheduler_fixture.py
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
};

Run sample(const SchedulerConfig& config, int64_t steps, const torch::Tensor& x_T, SamplerOptions options = {},
           uint64_t seed = 0) {
  Run run;
  std::vector<torch::Tensor> states;
  const ModelFn model = [&](const torch::Tensor& x, const torch::Tensor& t) {
    states.push_back(x.detach().clone());
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
    const auto betas = torch::tensor(scheduler_betas(config), torch::kDouble).to(torch::kFloat);
    const auto alphas_cumprod = torch::tensor(scheduler_alphas_cumprod(config), torch::kDouble).to(torch::kFloat);
    CHECK(torch::equal(betas, data.reference.load(name + "/betas")));
    CHECK(torch::equal(alphas_cumprod, data.reference.load(name + "/alphas_cumprod")));
  }
}

TEST_CASE("scheduler timesteps and DPM-Solver sigmas equal diffusers' set_timesteps", "[diffusion][scheduler]") {
  const auto& data = fixture();
  for (const auto& entry : data.cases.at("cases")) {
    const auto name = entry.at("name").get<std::string>();
    const auto config = read_scheduler_config(config_path(name));
    for (int64_t steps : entry.at("timestep_counts").get<std::vector<int64_t>>()) {
      INFO(name << ", " << steps << " steps");
      const auto expected = longs(data.reference.load(fmt::format("{}/timesteps/{}", name, steps)));
      CHECK(scheduler_timesteps(config, steps) == expected);
      if (config.kind == SchedulerKind::dpm_solver_multistep) {
        const auto sigmas = torch::tensor(scheduler_sigmas(config, steps), torch::kDouble).to(torch::kFloat);
        CHECK(torch::equal(sigmas, data.reference.load(fmt::format("{}/sigmas/{}", name, steps))));
      }
    }
  }
}

TEST_CASE("sampling trajectories match diffusers' DDIM and DPM-Solver++ loops", "[diffusion][scheduler]") {
  const auto& data = fixture();
  const auto x_T = data.reference.load("x_T");
  double worst_ddim[2] = {0, 0}, worst_dpm[2] = {0, 0};  // float64, float32
  for (const auto& entry : data.cases.at("cases")) {
    const auto name = entry.at("name").get<std::string>();
    const auto config = read_scheduler_config(config_path(name));
    const bool ddim = config.kind == SchedulerKind::ddim;
    for (int64_t steps : entry.at("trajectory_counts").get<std::vector<int64_t>>()) {
      for (int precision = 0; precision < 2; ++precision) {
        const auto dtype = precision == 0 ? torch::kDouble : torch::kFloat;
        INFO(name << ", " << steps << " steps, " << (precision == 0 ? "float64" : "float32"));
        const auto expected = data.reference.load(
            fmt::format("{}/trajectory/{}/{}", name, steps, precision == 0 ? "float64" : "float32"));
        const auto run = sample(config, steps, x_T.to(dtype));
        REQUIRE(run.trajectory.sizes() == expected.sizes());
        CHECK(run.trajectory.scalar_type() == dtype);
        CHECK(run.reported == scheduler_timesteps(config, steps));
        const double difference = relative_difference(run.trajectory, expected);
        // float64: diffusers computes its per-step coefficients (and DPM-Solver its sample) in float32
        CHECK(difference < (precision == 0 ? 1e-5 : 2e-5));
        auto& worst = ddim ? worst_ddim[precision] : worst_dpm[precision];
        worst = std::max(worst, difference);
      }
    }
  }
  std::cout << fmt::format("largest relative trajectory difference to diffusers: DDIM {:.2e} (float64), {:.2e} "
                           "(float32); DPM-Solver++ {:.2e} (float64), {:.2e} (float32)\n",
                           worst_ddim[0], worst_ddim[1], worst_dpm[0], worst_dpm[1]);
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
      {dpm + R"(, "use_flow_sigmas": true)", "use_flow_sigmas", "does not implement"},
      {dpm + R"(, "final_sigmas_type": "denoise_to_zero")", "final_sigmas_type", "denoise_to_zero"},
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
}
