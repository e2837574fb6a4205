// Exponential moving average of model weights (DiT/Latte's update_ema): ema = decay * ema + (1 - decay) * param,
// kept in fp32 beside the model; sampling uses the EMA weights.
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "tune/train/adamw.h"

namespace tune::train {

class ExponentialMovingAverage {
 public:
  // Starts as an exact copy of the parameters (DiT initialises with decay 0).
  ExponentialMovingAverage(const std::vector<NamedParameter>& params, double decay);

  void update(const std::vector<NamedParameter>& params);
  double decay() const { return decay_; }

  // Copies the averaged weights into `params` (same names), e.g. to sample with the EMA model.
  void copy_to(const std::vector<NamedParameter>& params) const;
  // Named tensors for checkpoints; load_state throws tune::InputError naming a missing or mis-shaped entry.
  const std::vector<std::pair<std::string, torch::Tensor>>& state() const { return averages_; }
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state);

 private:
  double decay_;
  std::vector<std::pair<std::string, torch::Tensor>> averages_;  // aligned with the params given at construction
};

}  // namespace tune::train
