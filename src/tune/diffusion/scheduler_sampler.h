// Sampling as a diffusers pipeline does with its scheduler config: DDIMScheduler through tune's DDIM sampler
// (a GaussianDiffusion whose steps are diffusers' timesteps and alpha_bar pairs, so gradient guidance and on_step
// work as in sampler.h), DPMSolverMultistepScheduler through DpmSolverMultistep (dpm_solver.h).
//
// What diffusers does that this keeps: the timesteps of scheduler_timesteps; DDIM's previous alpha_bar at
// t - T // n for every spacing (not the next listed timestep: they differ for "trailing" and "linspace"), and
// alpha_bar 1 or alpha_bar[0] (set_alpha_to_one) past t = 0; DDIM's eta noise drawn from the generator at every
// step, the last included; DPM-Solver's first-order first and last steps. The model returns the prediction named
// by prediction_type, shaped like x (a caller whose model also outputs variance channels, as Latte's does, drops
// them first, as the official Latte pipeline does; see SchedulerConfig::learned_variance).
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>

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

// Samples from x_T (standard normal; both schedulers start at sigma 1) with num_inference_steps steps, calling
// model(x, t) with t the original int64 timesteps [B]. Returns x_0 in x_T's compute dtype (float64, else float32).
// DDIM: ddim_sample_loop over scheduler_diffusion, with options as in sampler.h (eta, guidance, on_step;
// clip_denoised clamps x_0 and re-derives eps as improved-diffusion does, which is not diffusers' clip_sample).
// DPM-Solver: deterministic; on_step is called, and eta other than 0, guidance or clip_denoised throw
// tune::UsageError (not implemented for it). The generator is used by DDIM only.
torch::Tensor sample_with_scheduler(const SchedulerConfig& config, int64_t num_inference_steps, const ModelFn& model,
                                    const torch::Tensor& x_T, at::Generator generator,
                                    const SamplerOptions& options = {});

}  // namespace tune::diffusion
