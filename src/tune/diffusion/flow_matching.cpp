// Sana's flow-matching objective (flow_matching.h): the shifted sigma table, the timestep draw and the loss.
#include "tune/diffusion/flow_matching.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "tune/core/error.h"
#include "tune/diffusion/flow_sigmas.h"

namespace tune::diffusion {

TimestepDensity parse_timestep_density(const std::string& name) {
  if (name == "logit_normal") return TimestepDensity::logit_normal;
  if (name == "uniform" || name == "none") return TimestepDensity::uniform;
  if (name == "mode") return TimestepDensity::mode;
  throw UsageError(fmt::format("timestep density \"{}\" is not implemented: use \"logit_normal\", \"uniform\" (or "
                               "\"none\") or \"mode\"",
                               name));
}

FlowMatchingDraw FlowMatchingDraw::rows(int64_t begin, int64_t end) const {
  return {u.slice(0, begin, end), index.slice(0, begin, end), sigma.slice(0, begin, end),
          model_timesteps.slice(0, begin, end)};
}

FlowMatchingObjective::FlowMatchingObjective(FlowMatchingOptions options) : options_(options) {
  const auto& o = options_;
  if (o.num_train_timesteps < 1) {
    throw UsageError(fmt::format("flow matching: num_train_timesteps must be >= 1, got {}", o.num_train_timesteps));
  }
  if (!(o.flow_shift > 0.0) || !std::isfinite(o.flow_shift)) {
    throw UsageError(fmt::format("flow matching: flow_shift must be a number > 0, got {}", o.flow_shift));
  }
  if (!(o.logit_std > 0.0) || !std::isfinite(o.logit_std) || !std::isfinite(o.logit_mean)) {
    throw UsageError(fmt::format("flow matching: logit_normal needs a finite logit_mean and a logit_std > 0, got "
                                 "{} and {}",
                                 o.logit_mean, o.logit_std));
  }
  if (!std::isfinite(o.mode_scale)) throw UsageError(fmt::format("flow matching: mode_scale is {}", o.mode_scale));
  // The official linear_flow table: 1 - np.linspace(1.0, 0.001, 1000), shifted, in float64.
  const int64_t train = o.num_train_timesteps;
  for (double alpha : numpy_linspace(1.0, 1.0 / static_cast<double>(train), train)) {
    sigmas_.push_back(shift_flow_sigma(1.0 - alpha, o.flow_shift));
  }
}

FlowMatchingDraw FlowMatchingObjective::draw(int64_t batch, at::Generator& generator, torch::Device device) const {
  const auto float32 = torch::TensorOptions().dtype(torch::kFloat);
  torch::Tensor u;
  // float32 on the CPU, as diffusers' compute_density_for_timestep_sampling and the official trainer draw
  switch (options_.density) {
    case TimestepDensity::logit_normal:
      u = torch::sigmoid(torch::normal(options_.logit_mean, options_.logit_std, {batch}, generator, float32));
      break;
    case TimestepDensity::uniform:
      u = torch::rand({batch}, generator, float32);
      break;
    case TimestepDensity::mode: {
      const auto v = torch::rand({batch}, generator, float32);
      u = 1 - v - options_.mode_scale * (torch::cos(M_PI * v / 2).pow(2) - 1 + v);
      break;
    }
  }
  const int64_t train = options_.num_train_timesteps;
  // (u * T).long() truncates; sigmoid in float32 reaches 1.0 for n > ~17, and "mode" may leave [0, 1) for
  // mode_scale outside [-1, 1.5]: the clamp keeps the index a training index.
  const auto index = (u * static_cast<double>(train)).to(torch::kLong).clamp(0, train - 1);
  const auto table = torch::tensor(sigmas_, torch::kDouble);
  const auto sigma = table.index_select(0, index);
  // the official timestep_map (sigma * T, float64) indexed and cast to the index's dtype: truncation
  const auto model_timesteps = (sigma * static_cast<double>(train)).to(torch::kLong);
  return {u.to(device), index.to(device), sigma.to(device), model_timesteps.to(device)};
}

FlowMatchingPair flow_matching_pair(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& sigma) {
  if (noise.sizes() != x0.sizes() || sigma.dim() != 1 || sigma.size(0) != x0.size(0)) {
    throw Error(fmt::format("flow matching: x_0 {}, noise {} and sigma {} do not match (noise shaped like x_0, sigma "
                            "[B])",
                            fmt::join(x0.sizes(), "x"), fmt::join(noise.sizes(), "x"), fmt::join(sigma.sizes(), "x")));
  }
  std::vector<int64_t> shape(x0.dim(), 1);
  shape[0] = x0.size(0);
  const auto s = sigma.to(x0.device(), x0.scalar_type()).reshape(shape);
  const auto eps = noise.to(x0.scalar_type());
  return {(1 - s) * x0 + s * eps, eps - x0};
}

torch::Tensor flow_matching_loss_per_sample(const torch::Tensor& prediction, const torch::Tensor& target) {
  if (prediction.sizes() != target.sizes()) {
    throw Error(fmt::format("flow matching loss: prediction {} and target {} differ in shape",
                            fmt::join(prediction.sizes(), "x"), fmt::join(target.sizes(), "x")));
  }
  const auto dtype = torch::promote_types(torch::promote_types(prediction.scalar_type(), target.scalar_type()),
                                          torch::kFloat);
  const auto squared = (prediction.to(dtype) - target.to(dtype)).pow(2);
  if (squared.dim() == 1) return squared;
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < squared.dim(); ++d) dims.push_back(d);
  return squared.mean(dims);
}

}  // namespace tune::diffusion
