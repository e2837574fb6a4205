// Exponential moving average of model weights (DiT/Latte's update_ema): ema = decay * ema + (1 - decay) * param,
// kept in fp32 beside the model; sampling uses the EMA weights. Decay 0 (ema.decay: 0) makes the average the
// weights themselves, so fp32 weights are aliased rather than copied: no second copy of the trained weights in
// memory (6 GiB for Sana-1600M), and checkpoints still write the average (= the weights) as ema.safetensors.
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "tune/train/adamw.h"

namespace tune::train {

class ExponentialMovingAverage {
 public:
  // Starts as an exact copy of the parameters (DiT initialises with decay 0); with decay 0, as the parameters.
  ExponentialMovingAverage(const std::vector<NamedParameter>& params, double decay);

  void update(const std::vector<NamedParameter>& params);
  double decay() const { return decay_; }

  // Copies the averaged weights into `params` (same names), e.g. to sample with the EMA model.
  void copy_to(const std::vector<NamedParameter>& params) const;
  // Named tensors for checkpoints; load_state throws tune::InputError naming a missing or mis-shaped entry.
  const std::vector<std::pair<std::string, torch::Tensor>>& state() const { return averages_; }
  // Aliased averages (decay 0) are the weights, which the checkpoint's model weights restore: nothing is loaded
  // into them, so a checkpoint of another decay cannot overwrite the weights being trained.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state);
  // The bytes the averages hold beside the model (0 when every parameter is aliased).
  int64_t copy_bytes() const;

 private:
  double decay_;
  std::vector<std::pair<std::string, torch::Tensor>> averages_;  // aligned with the params given at construction
  std::vector<bool> aliased_;                                      // average i is parameter i itself (decay 0)
};

}  // namespace tune::train
