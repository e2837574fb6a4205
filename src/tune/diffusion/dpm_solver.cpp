// DPM-Solver++ 1S/2M steps (formulas in dpm_solver.h), coefficients in double.
#include "tune/diffusion/dpm_solver.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "tune/core/error.h"

namespace tune::diffusion {
namespace {


// Sample coefficient s_next / s_now and e^-h - 1, which expm1 keeps accurate for the small h of many steps.
struct StepCoefficients {
  double sample;
  double expm1_minus_h;
  double h;
};

using NoiseLevel = DpmSolverMultistep::NoiseLevel;

StepCoefficients coefficients(const NoiseLevel& now, const NoiseLevel& next) {
  const double h = next.lambda - now.lambda;
  return {next.scale / now.scale, std::expm1(-h), h};
}

}  // namespace

DpmSolverMultistep::NoiseLevel DpmSolverMultistep::noise_level(double sigma) const {
  // DDPM: sigma = s / alpha with alpha^2 + s^2 = 1; flow: the straight path from x_0 (sigma 0) to eps (sigma 1)
  const double alpha = options_.flow_sigmas ? 1.0 - sigma : 1.0 / std::sqrt(sigma * sigma + 1.0);
  const double scale = options_.flow_sigmas ? sigma : sigma * alpha;
  const double lambda = scale > 0.0 ? std::log(alpha) - std::log(scale) : std::numeric_limits<double>::infinity();
  return {alpha, scale, lambda};
}

DpmSolverMultistep::DpmSolverMultistep(std::vector<double> sigmas, DpmSolverOptions options)
    : sigmas_(std::move(sigmas)), options_(options) {
  if (sigmas_.size() < 2) throw Error("DPM-Solver: needs at least one step (two sigmas)");
  for (size_t i = 0; i < sigmas_.size(); ++i) {
    // Only the final sigma may be 0: a step from sigma 0 would divide by it.
    bool ok = i + 1 == sigmas_.size() ? sigmas_[i] >= 0.0 : sigmas_[i] > 0.0;
    if (options_.flow_sigmas) ok = ok && sigmas_[i] < 1.0;  // sigma 1 is pure noise: alpha 0, lambda -infinity
    if (!ok || !std::isfinite(sigmas_[i])) throw Error(fmt::format("DPM-Solver: sigma[{}] = {}", i, sigmas_[i]));
  }
  if (options_.order != 1 && options_.order != 2) {
    throw Error(fmt::format("DPM-Solver: order {} is not implemented (1 or 2)", options_.order));
  }
}

double DpmSolverMultistep::alpha(int64_t step) const { return noise_level(sigmas_.at(step)).alpha; }
double DpmSolverMultistep::noise_scale(int64_t step) const { return noise_level(sigmas_.at(step)).scale; }

bool DpmSolverMultistep::first_order_at(int64_t step) const {
  if (options_.order == 1 || step == 0) return true;  // no previous prediction yet
  const bool last = step == num_steps() - 1;
  // A final sigma of 0 makes h infinite, where only the first-order step is defined.
  return last && (options_.euler_at_final || (options_.lower_order_final && num_steps() < 15) || sigmas_.back() == 0.0);
}

torch::Tensor DpmSolverMultistep::step(int64_t step, const torch::Tensor& x, const torch::Tensor& predicted_x0) {
  if (step != next_step_ || step >= num_steps()) {
    throw Error(fmt::format("DPM-Solver: step {} taken, expected step {} of {}", step, next_step_, num_steps()));
  }
  torch::NoGradGuard no_grad;
  const auto now = noise_level(sigmas_[step]);
  const auto next = noise_level(sigmas_[step + 1]);
  const auto c = coefficients(now, next);
  const auto x0 = predicted_x0.detach().to(x.scalar_type());
  torch::Tensor result = c.sample * x - next.alpha * c.expm1_minus_h * x0;
  if (!first_order_at(step)) {
    const auto previous = noise_level(sigmas_[step - 1]);
    const double ratio = (now.lambda - previous.lambda) / c.h;  // r0 = h_previous / h
    const auto d1 = (x0 - previous_x0_) * (1.0 / ratio);
    if (options_.second_order == DpmSecondOrder::midpoint) {
      result = result - 0.5 * next.alpha * c.expm1_minus_h * d1;
    } else {
      result = result + next.alpha * (c.expm1_minus_h / c.h + 1.0) * d1;
    }
  }
  previous_x0_ = x0;
  ++next_step_;
  return result;
}

}  // namespace tune::diffusion
