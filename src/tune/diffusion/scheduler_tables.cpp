// What a scheduler config defines, computed as diffusers computes it: the float32 training tables (with the same
// LibTorch ops, so bit-equal) and numpy's timestep arithmetic (arange, linspace, round half to even) in double.
#include "tune/diffusion/scheduler_config.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "tune/core/error.h"
#include "tune/diffusion/schedule.h"

namespace tune::diffusion {
namespace {

std::string source_name(const SchedulerConfig& config) {
  return config.source.empty() ? std::string("scheduler config") : config.source.string();
}

std::vector<double> to_doubles(const torch::Tensor& tensor) {
  const auto values = tensor.to(torch::kDouble).contiguous();
  return {values.data_ptr<double>(), values.data_ptr<double>() + values.numel()};
}

torch::Tensor float32_betas(const SchedulerConfig& config) {
  const auto float32 = torch::TensorOptions().dtype(torch::kFloat);
  const int64_t steps = config.num_train_timesteps;
  torch::Tensor betas;
  if (!config.trained_betas.empty()) {
    betas = torch::tensor(config.trained_betas, torch::kDouble).to(torch::kFloat);
  } else if (config.beta_schedule == "linear") {
    betas = torch::linspace(config.beta_start, config.beta_end, steps, float32);
  } else if (config.beta_schedule == "scaled_linear") {
    // std::pow(x, 0.5), as Python's x ** 0.5, then squared in float32
    betas = torch::linspace(std::pow(config.beta_start, 0.5), std::pow(config.beta_end, 0.5), steps, float32).pow(2);
  } else if (config.beta_schedule == "squaredcos_cap_v2") {
    betas = torch::tensor(named_beta_schedule("squaredcos_cap_v2", steps), torch::kDouble).to(torch::kFloat);
  } else {
    throw InputError(fmt::format("{}: field 'beta_schedule' is \"{}\", which tune does not implement",
                                 source_name(config), config.beta_schedule));
  }
  // A beta of 0 or 1 (or beyond) makes alpha_bar stall or vanish and the samplers divide by zero.
  const auto outside = torch::logical_or(betas <= 0, betas >= 1).nonzero();
  if (outside.size(0) > 0) {
    const int64_t index = outside[0][0].item<int64_t>();
    const double value = betas[index].item<double>();
    const char* key = !config.trained_betas.empty() ? "trained_betas" : (value <= 0 ? "beta_start" : "beta_end");
    throw InputError(fmt::format("{}: field '{}' gives beta[{}] = {}, outside (0, 1)", source_name(config), key, index,
                                 value));
  }
  return betas;
}

torch::Tensor float32_alphas_cumprod(const SchedulerConfig& config) {
  return torch::cumprod(torch::rsub(float32_betas(config), 1.0), 0);
}

// numpy's round: half to even, which std::nearbyint does in the default rounding mode.
int64_t round_half_even(double value) { return static_cast<int64_t>(std::nearbyint(value)); }

// numpy.arange(start, 0, -step) for doubles: ceil(start / step) values start + i * delta, where delta is
// (start - step) - start as numpy fills from its first two entries.
std::vector<double> arange_down_to_zero(double start, double step) {
  const auto count = static_cast<int64_t>(std::ceil((0.0 - start) / -step));
  const double delta = (start - step) - start;
  std::vector<double> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(start + static_cast<double>(i) * delta);
  return values;
}

// numpy.linspace(0, stop, num): i * (stop / (num - 1)), the last exactly `stop`.
std::vector<double> linspace_from_zero(double stop, int64_t num) {
  if (num == 1) return {0.0};
  const double step = stop / static_cast<double>(num - 1);
  std::vector<double> values;
  for (int64_t i = 0; i < num; ++i) values.push_back(static_cast<double>(i) * step);
  values.back() = stop;
  return values;
}

std::vector<int64_t> ddim_timesteps(const SchedulerConfig& config, int64_t steps) {
  const int64_t train = config.num_train_timesteps;
  std::vector<int64_t> timesteps;
  if (config.timestep_spacing == "leading") {
    const int64_t ratio = train / steps;
    for (int64_t i = steps - 1; i >= 0; --i) timesteps.push_back(i * ratio + config.steps_offset);
  } else if (config.timestep_spacing == "trailing") {
    for (double value : arange_down_to_zero(static_cast<double>(train), static_cast<double>(train) / steps)) {
      timesteps.push_back(round_half_even(value) - 1);
    }
  } else {  // linspace
    const auto values = linspace_from_zero(static_cast<double>(train - 1), steps);
    for (auto it = values.rbegin(); it != values.rend(); ++it) timesteps.push_back(round_half_even(*it));
  }
  return timesteps;
}

// The first timestep past which lambda (log alpha - log sigma, float32) stays at or above lambda_min_clipped:
// num_train_timesteps, unless the clip removes the noisiest timesteps.
int64_t dpm_last_timestep(const SchedulerConfig& config) {
  if (std::isinf(config.lambda_min_clipped) && config.lambda_min_clipped < 0) return config.num_train_timesteps;
  const auto alphas_cumprod = float32_alphas_cumprod(config);
  const auto lambda = torch::log(torch::sqrt(alphas_cumprod)) - torch::log(torch::sqrt(1 - alphas_cumprod));
  const auto clipped = torch::searchsorted(torch::flip(lambda, {0}), config.lambda_min_clipped).item<int64_t>();
  return config.num_train_timesteps - clipped;
}

std::vector<int64_t> dpm_timesteps(const SchedulerConfig& config, int64_t steps) {
  const int64_t last = dpm_last_timestep(config);
  std::vector<int64_t> timesteps;
  if (config.timestep_spacing == "leading") {
    const int64_t ratio = last / (steps + 1);
    for (int64_t i = steps; i >= 1; --i) timesteps.push_back(i * ratio + config.steps_offset);
  } else if (config.timestep_spacing == "trailing") {
    const double ratio = static_cast<double>(config.num_train_timesteps) / steps;
    for (double value : arange_down_to_zero(static_cast<double>(last), ratio)) {
      timesteps.push_back(round_half_even(value) - 1);
    }
  } else {  // linspace over n + 1 points, the last (t = 0) dropped
    const auto values = linspace_from_zero(static_cast<double>(last - 1), steps + 1);
    for (size_t i = values.size() - 1; i >= 1; --i) timesteps.push_back(round_half_even(values[i]));
  }
  return timesteps;
}

}  // namespace

std::vector<double> scheduler_betas(const SchedulerConfig& config) { return to_doubles(float32_betas(config)); }

std::vector<double> scheduler_alphas_cumprod(const SchedulerConfig& config) {
  return to_doubles(float32_alphas_cumprod(config));
}

std::vector<int64_t> scheduler_timesteps(const SchedulerConfig& config, int64_t num_inference_steps) {
  if (num_inference_steps < 1 || num_inference_steps > config.num_train_timesteps) {
    throw UsageError(fmt::format("{} ({}): the number of sampling steps must lie in [1, num_train_timesteps = {}], "
                                 "got {}",
                                 config.class_name, source_name(config), config.num_train_timesteps,
                                 num_inference_steps));
  }
  auto timesteps = config.kind == SchedulerKind::ddim ? ddim_timesteps(config, num_inference_steps)
                                                      : dpm_timesteps(config, num_inference_steps);
  for (size_t i = 0; i < timesteps.size(); ++i) {
    const bool in_range = timesteps[i] >= 0 && timesteps[i] < config.num_train_timesteps;
    const bool descending = i == 0 || timesteps[i] < timesteps[i - 1];
    if (!in_range || !descending) {
      throw UsageError(fmt::format("{} ({}): {} sampling steps with timestep_spacing \"{}\" and steps_offset {} "
                                   "give timestep {} at step {}, {}; use fewer steps",
                                   config.class_name, source_name(config), num_inference_steps,
                                   config.timestep_spacing, config.steps_offset, timesteps[i], i,
                                   in_range ? "repeating the step before" : "outside the training process"));
    }
  }
  if (timesteps.empty()) {
    throw UsageError(fmt::format("{} ({}): lambda_min_clipped {} leaves no timestep to sample", config.class_name,
                                 source_name(config), config.lambda_min_clipped));
  }
  return timesteps;
}

std::vector<double> scheduler_sigmas(const SchedulerConfig& config, int64_t num_inference_steps) {
  const auto timesteps = scheduler_timesteps(config, num_inference_steps);
  const auto alphas_cumprod = float32_alphas_cumprod(config);
  const auto table = to_doubles(((1 - alphas_cumprod) / alphas_cumprod).pow(0.5));
  std::vector<double> sigmas;
  for (int64_t t : timesteps) sigmas.push_back(table[static_cast<size_t>(t)]);
  sigmas.push_back(config.final_sigmas_type == "sigma_min" ? table[0] : 0.0);
  return sigmas;
}

}  // namespace tune::diffusion
