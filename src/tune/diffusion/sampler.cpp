// DDPM and DDIM steps and loops, with gradient guidance (formulas in sampler.h).
#include "tune/diffusion/sampler.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

namespace tune::diffusion {
namespace {

struct GuidedPrediction {
  PredictedMeanVariance prediction;
  torch::Tensor gradient;  // undefined without guidance
};

// The model's p(x_{t-1} | x_t) and, with guidance, the guidance gradient; everything detached.
GuidedPrediction predict(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x,
                         const torch::Tensor& t, const SamplerOptions& options) {
  GuidedPrediction out;
  const auto detach_all = [](PredictedMeanVariance& p) {
    p.mean = p.mean.detach();
    p.variance = p.variance.detach();
    p.log_variance = p.log_variance.detach();
    p.pred_xstart = p.pred_xstart.detach();
  };
  if (options.guidance && options.guidance_through_model) {
    torch::AutoGradMode grad_on(true);
    const auto x_leaf = x.detach().requires_grad_(true);
    out.prediction = diffusion.p_mean_variance(model, x_leaf, t, options.clip_denoised);
    out.gradient = options.guidance(x_leaf, diffusion.original_timesteps(t), out.prediction.pred_xstart);
  } else {
    {
      torch::NoGradGuard no_grad;
      out.prediction = diffusion.p_mean_variance(model, x, t, options.clip_denoised);
    }
    if (options.guidance) {
      torch::AutoGradMode grad_on(true);
      out.gradient = options.guidance(x.detach(), diffusion.original_timesteps(t), out.prediction.pred_xstart.detach());
    }
  }
  detach_all(out.prediction);
  if (out.gradient.defined()) {
    if (out.gradient.sizes() != x.sizes()) {
      throw Error(fmt::format("diffusion sampler: the guidance gradient has shape {}, expected the sample's shape {}",
                              fmt::join(out.gradient.sizes(), "x"), fmt::join(x.sizes(), "x")));
    }
    out.gradient = out.gradient.detach().to(out.prediction.mean.scalar_type());
  }
  return out;
}

void check_noise(const torch::Tensor& noise, const torch::Tensor& x, const char* sampler) {
  if (noise.sizes() != x.sizes()) {
    throw Error(fmt::format("diffusion {}: noise of shape {} for a sample of shape {}", sampler,
                            fmt::join(noise.sizes(), "x"), fmt::join(x.sizes(), "x")));
  }
}

// 1 where t != 0, shaped [B, 1, ...]: no noise is added on the last step.
torch::Tensor nonzero_mask(const torch::Tensor& t, const torch::Tensor& like) {
  std::vector<int64_t> shape(like.dim(), 1);
  shape[0] = t.size(0);
  return (t.to(like.device()) != 0).to(like.scalar_type()).reshape(shape);
}

template <typename Step>
torch::Tensor run_loop(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x_T,
                       at::Generator& generator, const SamplerOptions& options, Step step) {
  auto x = x_T.to(compute_dtype(x_T.scalar_type()));
  const int64_t total = diffusion.num_timesteps();
  for (int64_t i = total - 1; i >= 0; --i) {
    const auto t = torch::full({x.size(0)}, i, torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    const auto noise = standard_normal(x.sizes(), generator, x.options());
    x = step(diffusion, model, x, t, noise, options).sample;
    if (options.on_step) options.on_step(total - i, total, diffusion.timestep_map()[static_cast<size_t>(i)]);
  }
  return x;
}

}  // namespace

torch::Tensor standard_normal(at::IntArrayRef shape, at::Generator& generator, const torch::TensorOptions& options) {
  return torch::randn(shape, generator, options.device(generator.device())).to(options.device());
}

SampleStep p_sample(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x,
                    const torch::Tensor& t, const torch::Tensor& noise, const SamplerOptions& options) {
  check_noise(noise, x, "p_sample");
  const auto guided = predict(diffusion, model, x, t, options);
  const auto& p = guided.prediction;
  torch::NoGradGuard no_grad;
  auto mean = guided.gradient.defined() ? p.mean + p.variance * guided.gradient : p.mean;
  const auto sample = mean + nonzero_mask(t, mean) * torch::exp(0.5 * p.log_variance) * noise.to(mean.scalar_type());
  return {sample, p.pred_xstart};
}

SampleStep ddim_sample(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x,
                       const torch::Tensor& t, const torch::Tensor& noise, const SamplerOptions& options) {
  check_noise(noise, x, "ddim_sample");
  if (options.eta < 0.0) {
    throw UsageError(fmt::format("diffusion: DDIM eta must be >= 0, got {}", options.eta));
  }
  const auto guided = predict(diffusion, model, x, t, options);
  torch::NoGradGuard no_grad;
  const auto& tables = diffusion.tables();
  auto pred_xstart = guided.prediction.pred_xstart;
  const auto alpha_bar = diffusion.extract(tables.alphas_cumprod, t, pred_xstart);
  const auto alpha_bar_prev = diffusion.extract(tables.alphas_cumprod_prev, t, pred_xstart);
  if (guided.gradient.defined()) {
    auto eps = diffusion.predict_eps_from_xstart(x, t, pred_xstart);
    eps = eps - torch::sqrt(1.0 - alpha_bar) * guided.gradient;
    pred_xstart = diffusion.predict_xstart_from_eps(x, t, eps);
  }
  // eps re-derived from x_0 (after clipping and guidance), as the reference does
  const auto eps = diffusion.predict_eps_from_xstart(x, t, pred_xstart);
  const auto sigma =
      options.eta * torch::sqrt((1.0 - alpha_bar_prev) / (1.0 - alpha_bar)) * torch::sqrt(1.0 - alpha_bar / alpha_bar_prev);
  const auto mean = pred_xstart * torch::sqrt(alpha_bar_prev) + torch::sqrt(1.0 - alpha_bar_prev - sigma.pow(2)) * eps;
  // No mask for t == 0 (the reference's): sigma is exactly 0 there when alpha_bar_prev is 1, and where a process
  // ends at alpha_bar[0] instead (diffusers' DDIM with set_alpha_to_one false) the last step is noised as there.
  const auto sample = mean + sigma * noise.to(mean.scalar_type());
  return {sample, pred_xstart};
}

torch::Tensor p_sample_loop(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x_T,
                            at::Generator generator, const SamplerOptions& options) {
  return run_loop(diffusion, model, x_T, generator, options, p_sample);
}

torch::Tensor ddim_sample_loop(const GaussianDiffusion& diffusion, const ModelFn& model, const torch::Tensor& x_T,
                               at::Generator generator, const SamplerOptions& options) {
  return run_loop(diffusion, model, x_T, generator, options, ddim_sample);
}

}  // namespace tune::diffusion
