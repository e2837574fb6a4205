// AdamW against torch.optim.AdamW (foreach=False): two groups, a varying lr, skipped gradients; state
// save/restore continuing bit for bit; bad state rejected by name; bf16 parameters with fp32 state.
#include "tune/train/adamw.h"

#include "fixture.h"
#include "tune/core/error.h"

#include <catch2/catch.hpp>

#include <map>

using tune::test::load_train_fixture;
using tune::test::max_abs_difference;
using tune::test::tensor_from_json;
using namespace tune::train;

namespace {

struct Setup {
  std::map<std::string, torch::Tensor> params;
  std::vector<ParamGroup> groups;
};

Setup make_setup(const nlohmann::json& fixture) {
  Setup setup;
  for (const auto& [name, entry] : fixture.at("initial").items()) {
    setup.params[name] = tensor_from_json(entry).requires_grad_(true);
  }
  for (const auto& group : fixture.at("groups")) {
    ParamGroup g;
    g.weight_decay = group.at("weight_decay").get<double>();
    for (const auto& name : group.at("names")) g.params.push_back({name.get<std::string>(), setup.params.at(name)});
    setup.groups.push_back(g);
  }
  return setup;
}

AdamWOptions options_from(const nlohmann::json& fixture, AdamWKernel kernel = AdamWKernel::automatic) {
  AdamWOptions options;
  options.kernel = kernel;
  options.beta1 = fixture.at("beta1").get<double>();
  options.beta2 = fixture.at("beta2").get<double>();
  options.eps = fixture.at("eps").get<double>();
  return options;
}

// Sets the grads of step `k` from the fixture (absent = undefined, as torch's None) and steps.
void run_step(AdamW& optimizer, Setup& setup, const nlohmann::json& step) {
  optimizer.zero_grad();
  for (auto& [name, param] : setup.params) {
    if (step.at("grads").contains(name)) param.mutable_grad() = tensor_from_json(step.at("grads").at(name));
  }
  optimizer.step(step.at("lr").get<double>());
}

std::vector<std::pair<std::string, torch::Tensor>> cloned(std::vector<std::pair<std::string, torch::Tensor>> state) {
  for (auto& entry : state) entry.second = entry.second.clone();
  return state;
}

}  // namespace

namespace {

// The fixture's 20 steps under `kernel`, each parameter within 1e-6 of torch.optim.AdamW after every step, and the
// per-parameter step counts that skipped gradients leave behind.
void check_fixture_trajectory(AdamWKernel kernel) {
  const auto fixture = load_train_fixture("adamw.json");
  auto setup = make_setup(fixture);
  AdamW optimizer(setup.groups, options_from(fixture, kernel));
  int step_index = 0;
  for (const auto& step : fixture.at("steps")) {
    run_step(optimizer, setup, step);
    for (const auto& [name, expected] : step.at("params_after").items()) {
      INFO("step " << step_index << ", parameter " << name);
      CHECK(max_abs_difference(setup.params.at(name), tensor_from_json(expected)) <= 1e-6);
    }
    ++step_index;
  }
  CHECK(optimizer.steps_taken() == 20);
  // layer.bias was skipped twice and head.weight once: per-parameter counts lag behind.
  std::map<std::string, int64_t> steps;
  for (const auto& [name, tensor] : optimizer.state_tensors()) {
    if (name.size() > 5 && name.substr(name.size() - 5) == ".step") steps[name] = tensor.item<int64_t>();
  }
  CHECK(steps.at("layer.bias.step") == 18);
  CHECK(steps.at("head.weight.step") == 19);
  CHECK(steps.at("layer.weight.step") == 20);
}

}  // namespace

TEST_CASE("adamw: 20 steps with two groups, varying lr and skipped grads match torch.optim.AdamW") {
  check_fixture_trajectory(AdamWKernel::sliced);
}

TEST_CASE("adamw: the fused kernel (LibTorch's, on the CPU) matches torch.optim.AdamW over the same 20 steps") {
  REQUIRE(adamw_uses_fused_kernel(AdamWOptions{.kernel = AdamWKernel::fused}, torch::kFloat, torch::kCPU));
  check_fixture_trajectory(AdamWKernel::fused);
}

TEST_CASE("adamw: which kernel each option takes") {
  AdamWOptions options;
  CHECK(adamw_uses_fused_kernel(options, torch::kFloat, torch::kCPU));  // auto: CUDA and the CPU
  CHECK(adamw_uses_fused_kernel(options, torch::kFloat, torch::Device(torch::kCUDA, 0)));
  CHECK_FALSE(adamw_uses_fused_kernel(options, torch::kBFloat16, torch::Device(torch::kCUDA, 0)));
  options.state_dtype = torch::kBFloat16;  // tune's bf16 moments: only the sliced path computes them
  CHECK_FALSE(adamw_uses_fused_kernel(options, torch::kFloat, torch::Device(torch::kCUDA, 0)));
  options.state_dtype = torch::kFloat;
  options.kernel = AdamWKernel::sliced;
  CHECK_FALSE(adamw_uses_fused_kernel(options, torch::kFloat, torch::Device(torch::kCUDA, 0)));
}

TEST_CASE("adamw: a checkpoint resumes across kernels (fused <-> sliced) on the same trajectory") {
  const auto fixture = load_train_fixture("adamw.json");
  const auto& steps = fixture.at("steps");
  for (const auto& [first, second] : {std::pair{AdamWKernel::fused, AdamWKernel::sliced},
                                      std::pair{AdamWKernel::sliced, AdamWKernel::fused},
                                      std::pair{AdamWKernel::fused, AdamWKernel::fused}}) {
    auto first_half = make_setup(fixture);
    AdamW before(first_half.groups, options_from(fixture, first));
    for (int k = 0; k < 10; ++k) run_step(before, first_half, steps[k]);
    const auto saved = cloned(before.state_tensors());
    auto resumed = make_setup(fixture);
    for (auto& [name, param] : resumed.params) {
      torch::NoGradGuard no_grad;
      param.copy_(first_half.params.at(name));
    }
    AdamW after(resumed.groups, options_from(fixture, second));
    after.load_state_tensors(saved);
    // The uninterrupted fused run, for the bitwise case.
    auto uninterrupted = make_setup(fixture);
    AdamW reference(uninterrupted.groups, options_from(fixture, first));
    for (int k = 0; k < 20; ++k) run_step(reference, uninterrupted, steps[k]);
    for (int k = 10; k < 20; ++k) run_step(after, resumed, steps[k]);
    for (const auto& [name, expected] : steps[19].at("params_after").items()) {
      INFO("kernels " << static_cast<int>(first) << " -> " << static_cast<int>(second) << ", parameter " << name);
      CHECK(max_abs_difference(resumed.params.at(name), tensor_from_json(expected)) <= 1e-6);
      if (first == second) CHECK(torch::equal(resumed.params.at(name), uninterrupted.params.at(name)));
    }
  }
}

TEST_CASE("adamw: the fused kernel on CUDA matches the sliced update on the CPU", "[cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: the CUDA case is not exercised");
    return;
  }
  const auto fixture = load_train_fixture("adamw.json");
  auto cpu = make_setup(fixture);
  AdamW cpu_optimizer(cpu.groups, options_from(fixture, AdamWKernel::sliced));
  auto gpu = make_setup(fixture);
  const torch::Device cuda(torch::kCUDA, 0);
  for (auto& [name, param] : gpu.params) param = param.detach().to(cuda).requires_grad_(true);
  for (auto& group : gpu.groups) {
    for (auto& named : group.params) named.tensor = gpu.params.at(named.name);
  }
  AdamW gpu_optimizer(gpu.groups, options_from(fixture));  // automatic: fused on CUDA
  for (const auto& step : fixture.at("steps")) {
    run_step(cpu_optimizer, cpu, step);
    gpu_optimizer.zero_grad();
    for (auto& [name, param] : gpu.params) {
      if (step.at("grads").contains(name)) param.mutable_grad() = tensor_from_json(step.at("grads").at(name)).to(cuda);
    }
    gpu_optimizer.step(step.at("lr").get<double>());
  }
  for (const auto& [name, param] : cpu.params) {
    INFO(name);
    CHECK(max_abs_difference(gpu.params.at(name).cpu(), param) <= 1e-6);
  }
}

TEST_CASE("adamw: a parameter with no grad is left untouched") {
  auto a = torch::ones({2, 2}).requires_grad_(true);
  auto b = torch::ones({3}).requires_grad_(true);
  AdamW optimizer({{{{"a", a}, {"b", b}}, 0.1}}, {});
  a.mutable_grad() = torch::full({2, 2}, 0.5);
  optimizer.step(1e-2);
  CHECK(torch::equal(b, torch::ones({3})));
  CHECK_FALSE(torch::equal(a, torch::ones({2, 2})));
}

TEST_CASE("adamw: restoring state_tensors continues exactly like the uninterrupted optimizer") {
  const auto fixture = load_train_fixture("adamw.json");
  const auto& steps = fixture.at("steps");
  auto uninterrupted = make_setup(fixture);
  AdamW reference(uninterrupted.groups, options_from(fixture));

  auto first_half = make_setup(fixture);
  AdamW before(first_half.groups, options_from(fixture));
  for (int k = 0; k < 10; ++k) {
    run_step(reference, uninterrupted, steps[k]);
    run_step(before, first_half, steps[k]);
  }
  const auto saved = cloned(before.state_tensors());

  // A fresh optimizer over fresh parameters holding the first half's values, as after loading a checkpoint.
  auto resumed = make_setup(fixture);
  for (auto& [name, param] : resumed.params) {
    torch::NoGradGuard no_grad;
    param.copy_(first_half.params.at(name));
  }
  AdamW after(resumed.groups, options_from(fixture));
  after.load_state_tensors(saved);
  CHECK(after.steps_taken() == 10);
  for (int k = 10; k < 20; ++k) {
    run_step(reference, uninterrupted, steps[k]);
    run_step(after, resumed, steps[k]);
  }
  for (const auto& [name, param] : uninterrupted.params) {
    INFO(name);
    CHECK(torch::equal(param, resumed.params.at(name)));  // bitwise
  }
  const auto reference_state = reference.state_tensors();
  const auto resumed_state = after.state_tensors();
  REQUIRE(reference_state.size() == resumed_state.size());
  for (size_t i = 0; i < reference_state.size(); ++i) {
    INFO(reference_state[i].first);
    CHECK(reference_state[i].first == resumed_state[i].first);
    CHECK(torch::equal(reference_state[i].second, resumed_state[i].second));
  }
}

TEST_CASE("adamw: bad optimizer state is rejected with the entry's name, and leaves the optimizer unchanged") {
  auto w = torch::zeros({2, 3}).requires_grad_(true);
  auto b = torch::zeros({3}).requires_grad_(true);
  AdamW optimizer({{{{"w", w}}, 0.1}, {{{"b", b}}, 0.0}}, {});
  const auto good = cloned(optimizer.state_tensors());
  REQUIRE(good.size() == 6);

  auto with = [&](const std::string& name, torch::Tensor replacement) {
    auto state = good;
    for (auto& entry : state) {
      if (entry.first == name) entry.second = replacement;
    }
    return state;
  };
  auto without = [&](const std::string& name) {
    auto state = good;
    state.erase(std::remove_if(state.begin(), state.end(), [&](const auto& e) { return e.first == name; }),
                state.end());
    return state;
  };
  using Catch::Matchers::Contains;
  CHECK_THROWS_MATCHES(optimizer.load_state_tensors(without("w.exp_avg_sq")), tune::InputError,
                       Catch::Matchers::Predicate<tune::InputError>([](const tune::InputError& e) {
                         return std::string(e.what()).find("'w.exp_avg_sq' is missing") != std::string::npos;
                       }));
  CHECK_THROWS_WITH(optimizer.load_state_tensors(with("w.exp_avg", torch::zeros({3, 2}))),
                    Contains("'w.exp_avg'") && Contains("[3, 2]") && Contains("[2, 3]"));
  CHECK_THROWS_WITH(optimizer.load_state_tensors(with("b.exp_avg", torch::zeros({3}, torch::kLong))),
                    Contains("'b.exp_avg'"));
  CHECK_THROWS_WITH(optimizer.load_state_tensors(with("b.step", torch::tensor({1, 2}))), Contains("'b.step'"));
  CHECK_THROWS_WITH(optimizer.load_state_tensors(with("b.step", torch::tensor(-1.0))), Contains("'b.step'"));
  CHECK_THROWS_AS(optimizer.load_state_tensors(without("b.step")), tune::InputError);
  auto extra = good;
  extra.emplace_back("c.exp_avg", torch::zeros({1}));
  CHECK_THROWS_WITH(optimizer.load_state_tensors(extra), Contains("'c.exp_avg'") && Contains("matches no"));

  // A partly valid state that failed must not have been half applied.
  auto partly = with("b.step", torch::tensor(-1.0));
  for (auto& entry : partly) {
    if (entry.first == "w.step") entry.second = torch::tensor(int64_t{7});
  }
  CHECK_THROWS_AS(optimizer.load_state_tensors(partly), tune::InputError);
  CHECK(optimizer.steps_taken() == 0);
  for (const auto& [name, tensor] : optimizer.state_tensors()) CHECK(tensor.sum().item<double>() == 0.0);
}

TEST_CASE("adamw: bf16 parameters keep fp32 state and update in fp32") {
  const auto initial = torch::randn({4, 4}, torch::TensorOptions().dtype(torch::kFloat)).to(torch::kBFloat16);
  const auto grad = torch::randn({4, 4});
  auto low = initial.clone().requires_grad_(true);
  auto master = initial.to(torch::kFloat).requires_grad_(true);
  AdamW low_optimizer({{{{"w", low}}, 0.01}}, {});
  AdamW master_optimizer({{{{"w", master}}, 0.01}}, {});
  low.mutable_grad() = grad.to(torch::kBFloat16);
  master.mutable_grad() = grad.to(torch::kBFloat16).to(torch::kFloat);
  low_optimizer.step(0.05);
  master_optimizer.step(0.05);
  CHECK(low.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(low, master.to(torch::kBFloat16)));
  for (const auto& [name, tensor] : low_optimizer.state_tensors()) {
    if (name != "w.step") CHECK(tensor.scalar_type() == torch::kFloat);
  }
  CHECK(low_optimizer.state_bytes() == 2 * 16 * 4);
}

TEST_CASE("adamw: make_param_groups decays matrices only and leaves frozen parameters out") {
  std::vector<NamedParameter> params = {
      {"proj.weight", torch::zeros({4, 4}).requires_grad_(true)},
      {"proj.bias", torch::zeros({4}).requires_grad_(true)},
      {"norm.weight", torch::ones({4}).requires_grad_(true)},
      {"frozen.weight", torch::zeros({4, 4})},
      {"conv.weight", torch::zeros({2, 2, 3, 3}).requires_grad_(true)},
  };
  const auto groups = make_param_groups(params, 0.05);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].weight_decay == 0.05);
  REQUIRE(groups[0].params.size() == 2);
  CHECK(groups[0].params[0].name == "proj.weight");
  CHECK(groups[0].params[1].name == "conv.weight");
  CHECK(groups[1].weight_decay == 0.0);
  REQUIRE(groups[1].params.size() == 2);
  CHECK(groups[1].params[0].name == "proj.bias");
  CHECK(groups[1].params[1].name == "norm.weight");
}

TEST_CASE("adamw: step_on_device (tensor learning rate, skip flag) follows step() on the fused kernel") {
  // The reference is step() through the same fused kernel with the learning rate as a double; the device form takes
  // it as a float32 scalar (the kernels' tensor-lr form), so the two agree to that rounding, not bit for bit.
  torch::manual_seed(3);
  auto make = [] {
    std::vector<NamedParameter> named{{"w", torch::randn({4, 3}).requires_grad_(true)},
                                      {"b", torch::randn({3}).requires_grad_(true)}};
    return named;
  };
  const auto first = make();
  auto second = make();
  for (size_t i = 0; i < first.size(); ++i) second[i].tensor.detach().copy_(first[i].tensor.detach());
  const AdamWOptions options{.kernel = AdamWKernel::fused};
  AdamW reference(make_param_groups(first, 0.1), options);
  AdamW on_device(make_param_groups(second, 0.1), options);
  REQUIRE(on_device.can_step_on_device());
  const std::vector<double> lrs = {1e-2, 5e-3, 5e-3, 1e-3};
  const std::vector<bool> skipped = {false, false, true, false};
  for (size_t step = 0; step < lrs.size(); ++step) {
    INFO("step " << step);
    const auto grads = std::vector<torch::Tensor>{torch::randn({4, 3}), torch::randn({3})};
    const auto before = second[0].tensor.detach().clone();
    for (size_t i = 0; i < first.size(); ++i) {
      first[i].tensor.mutable_grad() = grads[i].clone();
      second[i].tensor.mutable_grad() = grads[i].clone();
    }
    if (!skipped[step]) reference.step(lrs[step]);
    on_device.step_on_device(torch::full({}, lrs[step], torch::kFloat),
                             torch::full({}, skipped[step] ? 1.0 : 0.0, torch::kFloat));
    on_device.count_device_step(!skipped[step]);
    if (skipped[step]) CHECK(torch::equal(second[0].tensor.detach(), before));
    for (size_t i = 0; i < first.size(); ++i) {
      INFO(first[i].name);
      CHECK(max_abs_difference(second[i].tensor.detach(), first[i].tensor.detach()) <= 1e-6);
    }
    reference.zero_grad();
    on_device.zero_grad();
  }
  CHECK(on_device.steps_taken() == reference.steps_taken());
  const auto expected = reference.state_tensors();
  const auto state = on_device.state_tensors();
  REQUIRE(state.size() == expected.size());
  for (size_t i = 0; i < state.size(); ++i) {
    INFO(state[i].first);
    CHECK(max_abs_difference(state[i].second.to(torch::kFloat), expected[i].second.to(torch::kFloat)) <= 1e-6);
  }
}

TEST_CASE("adamw: step_on_device refuses a parameter without a gradient or off the fused kernel") {
  std::vector<NamedParameter> named{{"w", torch::randn({2, 2}).requires_grad_(true)}};
  AdamW sliced(make_param_groups(named, 0.0), AdamWOptions{.kernel = AdamWKernel::sliced});
  CHECK_FALSE(sliced.can_step_on_device());
  AdamW fused(make_param_groups(named, 0.0), AdamWOptions{.kernel = AdamWKernel::fused});
  REQUIRE_THROWS_WITH(fused.step_on_device(torch::full({}, 1e-3, torch::kFloat), torch::zeros({}, torch::kFloat)),
                      Catch::Contains("'w' has no gradient"));
}
