// The flow-matching training objective of Sana (rectified flow, Esser et al. 2024, "Scaling Rectified Flow
// Transformers"): x_t = (1 - sigma) x_0 + sigma eps, and the model learns the velocity eps - x_0 by a per-sample
// mean squared error, unweighted; where the training signal concentrates is set by how sigma is drawn.
//
// This follows the official Sana trainer (NVlabs/Sana train_scripts/train.py with predict_flow_v, noise_schedule
// linear_flow), not diffusers' train_dreambooth_lora_sana.py: a draw u in [0, 1) picks an integer training index
// t = trunc(u T) (T = 1000), sigma is the shifted base sigma at t, base sigma(t) = 1 - linspace(1, 1/T, T)[t], and
// the model is called with the integer timestep trunc(sigma' T) (the official timestep_map indexed and cast to the
// index's integer dtype). diffusers' script instead takes a continuous sigma from its FlowMatchEuler table and
// calls the model with the float sigma T, unshifted as its README setup loads it.
//
// Everything is drawn for the global batch (every rank's rows) from one generator, then a rank takes its rows
// (FlowMatchingDraw::rows), so the draws do not depend on the number of processes. Torch-only: no model types.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tune::diffusion {

// How u in [0, 1) is drawn: diffusers' compute_density_for_timestep_sampling's weighting_scheme names.
enum class TimestepDensity {
  logit_normal,  // u = sigmoid(n), n ~ N(logit_mean, logit_std^2): the official trainer's and SD3's choice
  uniform,       // u ~ U[0, 1) (diffusers: "uniform", also what any other name such as "none" gives)
  mode,          // u = 1 - v - mode_scale (cos^2(pi v / 2) - 1 + v), v ~ U[0, 1) (SD3's mode sampling)
};

// "logit_normal", "uniform" (also "none"), "mode"; throws tune::UsageError naming the accepted names otherwise.
TimestepDensity parse_timestep_density(const std::string& name);

struct FlowMatchingOptions {
  int64_t num_train_timesteps = 1000;                      // T: training indices 0..T-1
  double flow_shift = 1.0;                                 // s of sigma' = s sigma / (1 + (s - 1) sigma); Sana: 3.0
  TimestepDensity density = TimestepDensity::logit_normal;
  double logit_mean = 0.0;                                 // logit_normal's n ~ N(mean, std^2)
  double logit_std = 1.0;
  double mode_scale = 1.29;                                // "mode" only; diffusers' scripts' default
};

// One draw for a batch, every tensor [B] on the requested device.
struct FlowMatchingDraw {
  torch::Tensor u;                // float32: the density's draw, as torch draws it on the CPU in float32
  torch::Tensor index;            // int64: trunc(u T), clamped to T - 1 (float32 sigmoid can round to 1)
  torch::Tensor sigma;            // float64: the shifted sigma at `index`
  torch::Tensor model_timesteps;  // int64: trunc(sigma T), what the model is called with

  FlowMatchingDraw rows(int64_t begin, int64_t end) const;  // this rank's rows of a global draw
};

class FlowMatchingObjective {
 public:
  // Throws tune::UsageError for T < 1, flow_shift <= 0, logit_std <= 0 or a non-finite setting.
  explicit FlowMatchingObjective(FlowMatchingOptions options);

  const FlowMatchingOptions& options() const { return options_; }
  // The shifted sigma of every training index, [T], float64: shift(1 - linspace(1, 1/T, T)[t]); 0 at t = 0.
  const std::vector<double>& sigmas() const { return sigmas_; }

  // u, index, sigma and the model's timesteps for `batch` rows (the global batch), drawn from the CPU generator
  // (as torch.normal / torch.rand with it), then moved to `device`.
  FlowMatchingDraw draw(int64_t batch, at::Generator& generator, torch::Device device = torch::kCPU) const;

 private:
  FlowMatchingOptions options_;
  std::vector<double> sigmas_;
};

// The model's input and its regression target from clean samples x_0 [B, ...], noise eps shaped like x_0 and
// sigma [B] (a draw's sigma): x_t = (1 - sigma) x_0 + sigma eps and target = eps - x_0, in x_0's dtype (sigma cast
// to it after broadcasting over the non-batch dims). x_0 and eps keep their autograd graphs.
struct FlowMatchingPair {
  torch::Tensor noisy;   // x_t
  torch::Tensor target;  // eps - x_0
};
FlowMatchingPair flow_matching_pair(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& sigma);

// mean((prediction - target)^2) over every non-batch dim, [B] (the official mean_flat), computed in float32 or
// wider (a bf16 prediction is upcast). Throws tune::Error when the shapes differ.
torch::Tensor flow_matching_loss_per_sample(const torch::Tensor& prediction, const torch::Tensor& target);

}  // namespace tune::diffusion
