// EMA of weights, as DiT's update_ema: ema.mul_(decay).add_(param, alpha=1 - decay).
#include "tune/train/ema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "tune/core/error.h"

namespace tune::train {
namespace {

void check_aligned(const std::vector<std::pair<std::string, torch::Tensor>>& averages,
                   const std::vector<NamedParameter>& params) {
  if (averages.size() != params.size()) {
    throw Error(fmt::format("EMA holds {} tensors but {} parameters were given", averages.size(), params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (averages[i].first != params[i].name) {
      throw Error(fmt::format("EMA tensor {} is '{}', parameter {} is '{}'", i, averages[i].first, i, params[i].name));
    }
  }
}

}  // namespace

ExponentialMovingAverage::ExponentialMovingAverage(const std::vector<NamedParameter>& params, double decay)
    : decay_(decay) {
  torch::NoGradGuard no_grad;
  for (const auto& param : params) {
    const torch::Tensor weights = param.tensor.detach();
    const bool alias = decay == 0.0 && weights.scalar_type() == torch::kFloat32;
    averages_.emplace_back(param.name, alias ? weights : weights.to(torch::kFloat32).clone());
    aliased_.push_back(alias);
  }
}

void ExponentialMovingAverage::update(const std::vector<NamedParameter>& params) {
  check_aligned(averages_, params);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (aliased_[i]) continue;
    averages_[i].second.mul_(decay_).add_(params[i].tensor.detach().to(torch::kFloat32), 1.0 - decay_);
  }
}

void ExponentialMovingAverage::copy_to(const std::vector<NamedParameter>& params) const {
  check_aligned(averages_, params);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!aliased_[i]) params[i].tensor.copy_(averages_[i].second);
  }
}

int64_t ExponentialMovingAverage::copy_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < averages_.size(); ++i) {
    if (!aliased_[i]) bytes += averages_[i].second.numel() * static_cast<int64_t>(averages_[i].second.element_size());
  }
  return bytes;
}

void ExponentialMovingAverage::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  for (size_t i = 0; i < averages_.size(); ++i) {
    auto& [name, average] = averages_[i];
    const auto found = by_name.find(name);
    if (found == by_name.end()) throw InputError(fmt::format("EMA state has no tensor '{}'", name));
    if (found->second.sizes() != average.sizes()) {
      throw InputError(fmt::format("EMA tensor '{}' has shape [{}], the model expects [{}]", name,
                                   fmt::join(found->second.sizes(), ", "), fmt::join(average.sizes(), ", ")));
    }
    if (aliased_[i]) continue;  // the weights, restored from the checkpoint's model weights
    torch::NoGradGuard no_grad;
    average.copy_(found->second);
  }
}

}  // namespace tune::train
