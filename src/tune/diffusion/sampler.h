// Ancestral (DDPM) and DDIM sampling over a (usually respaced) GaussianDiffusion, with seeded noise and an optional
// gradient-guidance hook. The model is called with the original timesteps (the respaced process maps them).
//
// Guidance: `guidance(x, t, pred_xstart)` returns g = grad_x log p(y | x_t), shaped like x, where t are the
// original timesteps. It is applied as in improved-diffusion / guided-diffusion:
//   DDPM (condition_mean, Sohl-Dickstein et al.):  mean' = mean + variance * g, then sample = mean' + sigma * z
//   DDIM (condition_score, Song et al.):           eps' = eps - sqrt(1 - alpha_bar_t) * g,
//                                                  pred_xstart' = (x - sqrt(1 - alpha_bar_t) eps') / sqrt(alpha_bar_t)
// with `variance` the model's variance of p(x_{t-1} | x_t) and eps, alpha_bar of the respaced process.
// With guidance_through_model (the default) the step runs the model with autograd on, on a leaf copy of x that
// requires grad, so pred_xstart depends on x and the callback can take torch::autograd::grad(f(pred_xstart), x)
// (the recipe's gradient-guided sampling); otherwise the model runs under no-grad and only the callback runs with
// grad mode on. Everything a step returns is detached.
#pragma once

#include "tune/diffusion/gaussian_diffusion.h"

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>

namespace tune::diffusion {

using GuidanceFn = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t,
                                               const torch::Tensor& pred_xstart)>;

struct SamplerOptions {
  double eta = 0.0;                    // DDIM only: 0 deterministic, 1 the DDPM posterior's variance
  bool clip_denoised = false;          // clamp pred_xstart to [-1, 1]; Latte samples latents with false
  GuidanceFn guidance;                 // empty: unguided
  bool guidance_through_model = true;  // see above
  // Progress, called after each step: steps done of total, and the original timestep (what the model saw) of the
  // step just taken, e.g. 999, 979, ..., 0 for 50 of 1000.
  std::function<void(int64_t done, int64_t total, int64_t timestep)> on_step;
};

struct SampleStep {
  torch::Tensor sample;       // x_{t-1}
  torch::Tensor pred_xstart;  // the x_0 prediction it came from
};

// One step from x_t at this process's timesteps t [B] with the given standard-normal noise (shaped like x; not
// used where t == 0).
SampleStep p_sample(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x,
                    const torch::Tensor& t, const torch::Tensor& noise, const SamplerOptions& options = {});
// DDIM (Song et al. eq. 12): sample = sqrt(abar_prev) x0 + sqrt(1 - abar_prev - sigma^2) eps + sigma z,
// sigma = eta sqrt((1 - abar_prev) / (1 - abar)) sqrt(1 - abar / abar_prev), eps re-derived from x0.
SampleStep ddim_sample(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x,
                       const torch::Tensor& t, const torch::Tensor& noise, const SamplerOptions& options = {});

// The full loops from x_T (e.g. drawn with standard_normal below) down to t = 0. Each step draws one
// standard-normal tensor shaped like x from `generator` (also at the last step, whose noise goes unused, as the
// reference does), so a seed fixes the result.
torch::Tensor p_sample_loop(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x_T,
                            at::Generator generator, const SamplerOptions& options = {});
torch::Tensor ddim_sample_loop(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x_T,
                               at::Generator generator, const SamplerOptions& options = {});

// Standard-normal noise drawn on the generator's device (so a CPU generator gives the same numbers whatever
// device the sample lives on), then moved to options' device.
torch::Tensor standard_normal(at::IntArrayRef shape, at::Generator& generator, const torch::TensorOptions& options);

}  // namespace tune::diffusion
