// Sampling as a diffusers pipeline does with its scheduler config: DDIMScheduler through tune's DDIM sampler
// (a GaussianDiffusion whose steps are diffusers' timesteps and alpha_bar pairs, so gradient guidance and on_step
// work as in sampler.h), DPMSolverMultistepScheduler (DDPM or flow sigmas) through DpmSolverMultistep
// (dpm_solver.h) and FlowMatchEulerDiscreteScheduler through x' = x + (sigma_next - sigma) v, both a step at a time
// in SchedulerStepper for a caller that runs the model itself.
//
// What diffusers does that this keeps: the timesteps of scheduler_timesteps; DDIM's previous alpha_bar at
// t - T // n for every spacing (not the next listed timestep: they differ for "trailing" and "linspace"), and
// alpha_bar 1 or alpha_bar[0] (set_alpha_to_one) past t = 0; DDIM's eta noise drawn from the generator at every
// step, the last included; DPM-Solver's first-order first and last steps; the model's timesteps in diffusers'
// dtype (int64, FlowMatchEuler's float32). The model returns the prediction named by prediction_type (a flow
// model's v = eps - x_0 for "flow_prediction" and FlowMatchEuler), shaped like x (a caller whose model also
// outputs variance channels, as Latte's does, drops them first, as the official Latte pipeline does; see
// SchedulerConfig::learned_variance).
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "tune/diffusion/dpm_solver.h"
#include "tune/diffusion/gaussian_diffusion.h"
#include "tune/diffusion/sampler.h"
#include "tune/diffusion/scheduler_config.h"

namespace tune::diffusion {

// The n-step DDIM process of a DDIMScheduler config: step i (ascending) is the i-th smallest of
// scheduler_timesteps (its timestep_map, what the model is called with), going from alpha_bar[t] to diffusers'
// previous alpha_bar. Its model is the one scheduler_process_model returns (mean type Epsilon, or StartX for
// prediction_type "sample"; fixed variance, so the output has x's shape). For ddim_sample / ddim_sample_loop only:
// its consecutive steps do not chain as a DDPM process's do. Throws tune::UsageError for a DPM-Solver config.
GaussianDiffusion scheduler_diffusion(const SchedulerConfig& config, int64_t num_inference_steps);

// The model as scheduler_diffusion's process expects it: unchanged, except that a v prediction is turned into
// eps = sqrt(alpha_bar_t) v + sqrt(1 - alpha_bar_t) x (t being the original timestep the model sees).
ModelFn scheduler_process_model(const SchedulerConfig& config, ModelFn model);

// One n-step run of a DPM-Solver or FlowMatchEuler config, a step at a time: for i in 0..num_steps()-1,
// call the model at (x, model_timesteps(i, ...)), then x = step(i, x, output).sample. What a recipe calls when it
// runs the model itself (classifier-free guidance, several conditionings, guidance on the x_0 prediction).
class SchedulerStepper {
 public:
  // Throws tune::UsageError for a DDIM config (its steps, with eta noise and guidance, are scheduler_diffusion's)
  // or a step count outside [1, num_train_timesteps].
  SchedulerStepper(const SchedulerConfig& config, int64_t num_inference_steps);

  int64_t num_steps() const { return static_cast<int64_t>(sigmas_.size()) - 1; }
  // diffusers' scheduler.timesteps, [n] on the CPU: int64 (DPM-Solver), float32 (FlowMatchEuler).
  const torch::Tensor& timesteps() const { return timesteps_; }
  // What diffusers' pipeline hands the model at `step`: timesteps()[step] expanded to [batch], on `device`.
  torch::Tensor model_timesteps(int64_t step, int64_t batch, torch::Device device) const;
  // The noise level of the sample at `step` (0..num_steps(); the last is the final sigma, 0 unless
  // final_sigmas_type "sigma_min"). Flow schedulers: x = (1 - sigma) x_0 + sigma eps.
  double sigma(int64_t step) const { return sigmas_.at(static_cast<size_t>(step)); }

  struct Result {
    torch::Tensor sample;        // x at step + 1, detached, in x's dtype
    torch::Tensor predicted_x0;  // the model's x_0 at this step (flow: x - sigma v); keeps x's and the output's
                                 // autograd graph, so a guidance objective on it can be differentiated
  };
  // From x at `step` and the model's output there (the prediction named by prediction_type, shaped like x).
  // Steps go in order; throws tune::Error otherwise, and for an output of another shape.
  Result step(int64_t step, const torch::Tensor& x, const torch::Tensor& model_output);

 private:
  torch::Tensor predicted_x0(int64_t step, const torch::Tensor& x, const torch::Tensor& output) const;

  SchedulerConfig config_;
  std::vector<double> sigmas_;
  torch::Tensor timesteps_;
  std::optional<DpmSolverMultistep> dpm_solver_;  // DPM-Solver configs; FlowMatchEuler needs no history
  int64_t next_step_ = 0;
};

// Samples from x_T (standard normal; every scheduler here starts at or next to pure noise) with
// num_inference_steps steps, calling model(x, t) with t diffusers' timesteps [B] (int64; float32 for
// FlowMatchEuler). Returns x_0 in x_T's compute dtype (float64, else float32).
// DDIM: ddim_sample_loop over scheduler_diffusion, with options as in sampler.h (eta, guidance, on_step;
// clip_denoised clamps x_0 and re-derives eps as improved-diffusion does, which is not diffusers' clip_sample).
// DPM-Solver and FlowMatchEuler: SchedulerStepper's steps, deterministic; on_step is called (with FlowMatchEuler's
// timestep rounded to an integer), and eta other than 0, guidance or clip_denoised throw tune::UsageError (not
// implemented for them). The generator is used by DDIM only.
torch::Tensor sample_with_scheduler(const SchedulerConfig& config, int64_t num_inference_steps, const ModelFn& model,
                                    const torch::Tensor& x_T, at::Generator generator,
                                    const SamplerOptions& options = {});

}  // namespace tune::diffusion
