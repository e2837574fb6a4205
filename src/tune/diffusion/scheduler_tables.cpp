// What a scheduler config defines, computed as diffusers computes it: the float32 training tables (with the same
// LibTorch ops, so bit-equal) and numpy's timestep and flow-sigma arithmetic (arange, linspace, round half to
// even, the shift) in double, cast to float32 where diffusers casts.
#include "tune/diffusion/scheduler_config.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "tune/core/error.h"
#include "tune/diffusion/flow_sigmas.h"
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

void check_step_count(const SchedulerConfig& config, int64_t num_inference_steps) {
  if (num_inference_steps < 1 || num_inference_steps > config.num_train_timesteps) {
    throw UsageError(fmt::format("{} ({}): the number of sampling steps must lie in [1, num_train_timesteps = {}], "
                                 "got {}",
                                 config.class_name, source_name(config), config.num_train_timesteps,
                                 num_inference_steps));
  }
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

// DPM-Solver's flow sigmas in float64 (before diffusers' float32 cast): shift(1 - a) for a = linspace(1, 1/T,
// n + 1), reversed, the last (sigma 0) dropped. timestep_spacing and lambda_min_clipped play no part.
std::vector<double> dpm_flow_sigmas(const SchedulerConfig& config, int64_t steps) {
  const auto alphas = numpy_linspace(1.0, 1.0 / static_cast<double>(config.num_train_timesteps), steps + 1);
  std::vector<double> sigmas;
  for (size_t i = alphas.size() - 1; i >= 1; --i) {
    sigmas.push_back(shift_flow_sigma(1.0 - alphas[i], config.flow_shift));
  }
  return sigmas;
}

std::vector<int64_t> dpm_flow_timesteps(const SchedulerConfig& config, int64_t steps) {
  std::vector<int64_t> timesteps;
  // torch's float64 -> int64 conversion truncates toward zero
  for (double sigma : dpm_flow_sigmas(config, steps)) {
    timesteps.push_back(static_cast<int64_t>(sigma * static_cast<double>(config.num_train_timesteps)));
  }
  return timesteps;
}

// FlowMatchEuler's n sigmas (float32) and its timesteps (sigma * T, float32). diffusers builds a shifted
// float32 training table sigma(k) = shift(k / T), k = T..1 (LibTorch's float32 ops here, as there), takes its
// ends as timesteps T sigma(T), T sigma(1), spaces n points between them in float64, divides by T and shifts
// those again, then casts to float32.
std::pair<torch::Tensor, torch::Tensor> flow_match_euler_schedule(const SchedulerConfig& config, int64_t steps) {
  const int64_t train = config.num_train_timesteps;
  const double shift = config.flow_shift;
  const auto ends = torch::tensor({static_cast<double>(train), 1.0}, torch::kDouble).to(torch::kFloat) /
                    static_cast<double>(train);
  const auto shifted_ends = ends * shift / ((shift - 1.0) * ends + 1.0);
  const double sigma_max = shifted_ends[0].item<double>(), sigma_min = shifted_ends[1].item<double>();
  std::vector<double> sigmas;
  for (double timestep : numpy_linspace(sigma_max * static_cast<double>(train), sigma_min * static_cast<double>(train),
                                        steps)) {
    sigmas.push_back(shift_flow_sigma(timestep / static_cast<double>(train), shift));
  }
  const auto float32_sigmas = torch::tensor(sigmas, torch::kDouble).to(torch::kFloat);
  return {float32_sigmas, float32_sigmas * static_cast<double>(train)};
}

}  // namespace

std::vector<double> scheduler_betas(const SchedulerConfig& config) { return to_doubles(float32_betas(config)); }

std::vector<double> scheduler_alphas_cumprod(const SchedulerConfig& config) {
  return to_doubles(float32_alphas_cumprod(config));
}

std::vector<int64_t> scheduler_timesteps(const SchedulerConfig& config, int64_t num_inference_steps) {
  check_step_count(config, num_inference_steps);
  if (config.kind == SchedulerKind::flow_match_euler) {
    throw UsageError(fmt::format("{} ({}): its timesteps are float32 (sigma * num_train_timesteps), not integers; "
                                 "use scheduler_model_timesteps",
                                 config.class_name, source_name(config)));
  }
  auto timesteps = config.kind == SchedulerKind::ddim ? ddim_timesteps(config, num_inference_steps)
                   : config.use_flow_sigmas           ? dpm_flow_timesteps(config, num_inference_steps)
                                                      : dpm_timesteps(config, num_inference_steps);
  for (size_t i = 0; i < timesteps.size(); ++i) {
    const bool in_range = timesteps[i] >= 0 && timesteps[i] < config.num_train_timesteps;
    // flow sigmas step in sigma, and truncating sigma * T may repeat a timestep, as it does in diffusers
    const bool descending =
        i == 0 || timesteps[i] < timesteps[i - 1] || (config.use_flow_sigmas && timesteps[i] == timesteps[i - 1]);
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

torch::Tensor scheduler_model_timesteps(const SchedulerConfig& config, int64_t num_inference_steps) {
  if (config.kind != SchedulerKind::flow_match_euler) {
    return torch::tensor(scheduler_timesteps(config, num_inference_steps), torch::kLong);
  }
  check_step_count(config, num_inference_steps);
  return flow_match_euler_schedule(config, num_inference_steps).second;
}

std::vector<double> scheduler_sigmas(const SchedulerConfig& config, int64_t num_inference_steps) {
  if (config.kind == SchedulerKind::ddim) {
    throw UsageError(fmt::format("{} ({}): DDIM steps in alpha_bar; it has no sigmas", config.class_name,
                                 source_name(config)));
  }
  if (config.kind == SchedulerKind::flow_match_euler) {
    check_step_count(config, num_inference_steps);
    auto sigmas = to_doubles(flow_match_euler_schedule(config, num_inference_steps).first);
    sigmas.push_back(0.0);
    return sigmas;
  }
  const auto timesteps = scheduler_timesteps(config, num_inference_steps);  // checks the step count
  const auto alphas_cumprod = float32_alphas_cumprod(config);
  const auto table = to_doubles(((1 - alphas_cumprod) / alphas_cumprod).pow(0.5));
  std::vector<double> sigmas;
  if (config.use_flow_sigmas) {
    for (double sigma : dpm_flow_sigmas(config, num_inference_steps)) {
      sigmas.push_back(static_cast<double>(static_cast<float>(sigma)));  // diffusers stores float32 sigmas
    }
  } else {
    for (int64_t t : timesteps) sigmas.push_back(table[static_cast<size_t>(t)]);
  }
  // diffusers takes "sigma_min" from the DDPM betas even on flow sigmas
  sigmas.push_back(config.final_sigmas_type == "sigma_min" ? table[0] : 0.0);
  return sigmas;
}

}  // namespace tune::diffusion
