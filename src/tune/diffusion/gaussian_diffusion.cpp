// Gaussian diffusion: float64 schedule tables, q and p, and the hybrid training loss (see gaussian_diffusion.h).
#include "tune/diffusion/gaussian_diffusion.h"

#include "tune/core/error.h"
#include "tune/diffusion/distributions.h"
#include "tune/diffusion/schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>

namespace tune::diffusion {
namespace {

torch::Tensor to_tensor(const std::vector<double>& values) {
  return torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble));
}

}  // namespace

torch::ScalarType compute_dtype(torch::ScalarType dtype) {
  return dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
}

torch::Tensor mean_flat(const torch::Tensor& tensor) {
  if (tensor.dim() <= 1) return tensor;
  std::vector<int64_t> dims(tensor.dim() - 1);
  std::iota(dims.begin(), dims.end(), 1);
  return tensor.mean(dims);
}

namespace {

// Every table from the per-step (beta, alpha_bar, alpha_bar_prev); alpha_bar_next is the next step's alpha_bar.
ScheduleTables tables_from(const std::vector<double>& betas, const std::vector<double>& abar,
                           const std::vector<double>& abar_prev) {
  const size_t n = betas.size();
  std::vector<double> abar_next(n), sqrt_abar(n), sqrt_one_minus(n), log_one_minus(n), sqrt_recip(n),
      sqrt_recipm1(n), post_var(n), post_log_var(n), coef1(n), coef2(n);
  for (size_t i = 0; i < n; ++i) {
    abar_next[i] = i + 1 == n ? 0.0 : abar[i + 1];
    sqrt_abar[i] = std::sqrt(abar[i]);
    sqrt_one_minus[i] = std::sqrt(1.0 - abar[i]);
    log_one_minus[i] = std::log(1.0 - abar[i]);
    sqrt_recip[i] = std::sqrt(1.0 / abar[i]);
    sqrt_recipm1[i] = std::sqrt(1.0 / abar[i] - 1.0);
    post_var[i] = betas[i] * (1.0 - abar_prev[i]) / (1.0 - abar[i]);
    coef1[i] = betas[i] * std::sqrt(abar_prev[i]) / (1.0 - abar[i]);
    coef2[i] = (1.0 - abar_prev[i]) * std::sqrt(1.0 - betas[i]) / (1.0 - abar[i]);
  }
  // The posterior variance is 0 at t = 0; its log takes t = 1's value (a one-step process falls back to beta_0).
  for (size_t i = 0; i < n; ++i) post_log_var[i] = std::log(i > 0 ? post_var[i] : (n > 1 ? post_var[1] : betas[0]));
  ScheduleTables tables;
  tables.betas = to_tensor(betas);
  tables.alphas_cumprod = to_tensor(abar);
  tables.alphas_cumprod_prev = to_tensor(abar_prev);
  tables.alphas_cumprod_next = to_tensor(abar_next);
  tables.sqrt_alphas_cumprod = to_tensor(sqrt_abar);
  tables.sqrt_one_minus_alphas_cumprod = to_tensor(sqrt_one_minus);
  tables.log_one_minus_alphas_cumprod = to_tensor(log_one_minus);
  tables.sqrt_recip_alphas_cumprod = to_tensor(sqrt_recip);
  tables.sqrt_recipm1_alphas_cumprod = to_tensor(sqrt_recipm1);
  tables.posterior_variance = to_tensor(post_var);
  tables.posterior_log_variance_clipped = to_tensor(post_log_var);
  tables.posterior_mean_coef1 = to_tensor(coef1);
  tables.posterior_mean_coef2 = to_tensor(coef2);
  return tables;
}

const std::vector<double>& checked_betas(const std::vector<double>& betas) {
  if (betas.empty()) throw UsageError("diffusion: a diffusion process needs at least one beta");
  for (size_t i = 0; i < betas.size(); ++i) {
    if (!(betas[i] > 0.0 && betas[i] <= 1.0)) {
      throw UsageError(fmt::format("diffusion: beta[{}] = {} is outside (0, 1]", i, betas[i]));
    }
  }
  return betas;
}

}  // namespace

ScheduleTables ScheduleTables::from_betas(const std::vector<double>& betas) {
  const size_t n = betas.size();
  std::vector<double> abar(n), abar_prev(n);
  double running = 1.0;
  for (size_t i = 0; i < n; ++i) {
    abar_prev[i] = running;
    running *= 1.0 - betas[i];
    abar[i] = running;
  }
  return tables_from(betas, abar, abar_prev);
}

ScheduleTables ScheduleTables::from_alphas_cumprod(const std::vector<double>& alphas_cumprod,
                                                   const std::vector<double>& alphas_cumprod_prev) {
  if (alphas_cumprod.empty() || alphas_cumprod.size() != alphas_cumprod_prev.size()) {
    throw Error(fmt::format("diffusion: {} alpha_bar values with {} previous ones", alphas_cumprod.size(),
                            alphas_cumprod_prev.size()));
  }
  std::vector<double> betas(alphas_cumprod.size());
  for (size_t i = 0; i < betas.size(); ++i) {
    const double abar = alphas_cumprod[i], abar_prev = alphas_cumprod_prev[i];
    if (!(abar > 0.0 && abar <= abar_prev && abar_prev <= 1.0)) {
      throw Error(fmt::format("diffusion: step {} goes from alpha_bar {} to {}; expected 0 < alpha_bar <= "
                              "previous alpha_bar <= 1",
                              i, abar, abar_prev));
    }
    betas[i] = 1.0 - abar / abar_prev;
  }
  return tables_from(betas, alphas_cumprod, alphas_cumprod_prev);
}

GaussianDiffusion::GaussianDiffusion(const std::vector<double>& betas, ProcessOptions options,
                                     std::vector<int64_t> timestep_map, int64_t original_num_steps)
    : GaussianDiffusion(ScheduleTables::from_betas(checked_betas(betas)), options, std::move(timestep_map),
                        original_num_steps) {}

GaussianDiffusion::GaussianDiffusion(ScheduleTables tables, ProcessOptions options, std::vector<int64_t> timestep_map,
                                     int64_t original_num_steps)
    : options_(options), tables_(std::move(tables)) {
  if (!tables_.betas.defined() || tables_.betas.numel() == 0) {
    throw UsageError("diffusion: a diffusion process needs at least one step");
  }
  num_timesteps_ = tables_.betas.numel();
  const auto betas = tables_.betas;
  if (!(betas.ge(0.0).all().item<bool>() && betas.le(1.0).all().item<bool>())) {
    throw UsageError("diffusion: a process's betas must lie in [0, 1]");
  }
  if (timestep_map.empty()) {
    timestep_map.resize(static_cast<size_t>(num_timesteps_));
    std::iota(timestep_map.begin(), timestep_map.end(), int64_t{0});
  }
  if (static_cast<int64_t>(timestep_map.size()) != num_timesteps_) {
    throw Error(fmt::format("diffusion: timestep map has {} entries for {} betas", timestep_map.size(), num_timesteps_));
  }
  if (options_.channel_dim < 1) {
    throw UsageError(fmt::format("diffusion: channel_dim must be >= 1 (dim 0 is the batch), got {}",
                                 options_.channel_dim));
  }
  timestep_map_ = std::move(timestep_map);
  original_num_steps_ = original_num_steps > 0 ? original_num_steps : num_timesteps_;
  timestep_map_tensor_ = torch::tensor(timestep_map_, torch::TensorOptions().dtype(torch::kLong));
  fixed_large_variance_ = betas.clone();
  if (num_timesteps_ > 1) fixed_large_variance_[0] = tables_.posterior_variance[1];
}

torch::Tensor GaussianDiffusion::original_timesteps(const torch::Tensor& t) const {
  return timestep_map_tensor_.to(t.device()).index_select(0, t.to(torch::kLong).reshape({-1})).to(t.scalar_type());
}

void GaussianDiffusion::check_timesteps(const torch::Tensor& t, const torch::Tensor& x, const char* what) const {
  if (t.dim() != 1 || x.dim() < 1 || t.size(0) != x.size(0)) {
    throw Error(fmt::format("diffusion {}: expected timesteps [B] for x of shape {}, got timesteps of shape {}", what,
                            fmt::join(x.sizes(), "x"), fmt::join(t.sizes(), "x")));
  }
  if (t.numel() > 0) {
    const auto lowest = t.min().item<int64_t>();
    const auto highest = t.max().item<int64_t>();
    if (lowest < 0 || highest >= num_timesteps_) {
      throw Error(fmt::format("diffusion {}: timesteps must lie in [0, {}), got [{}, {}]", what, num_timesteps_,
                              lowest, highest));
    }
  }
}

torch::Tensor GaussianDiffusion::extract(const torch::Tensor& table, const torch::Tensor& t,
                                         const torch::Tensor& like) const {
  std::vector<int64_t> shape(like.dim(), 1);
  shape[0] = t.size(0);
  return table.to(like.device())
      .index_select(0, t.to(like.device(), torch::kLong))
      .to(compute_dtype(like.scalar_type()))
      .reshape(shape);
}

MeanVariance GaussianDiffusion::q_mean_variance(const torch::Tensor& x_start, const torch::Tensor& t) const {
  check_timesteps(t, x_start, "q_mean_variance");
  const auto x = x_start.to(compute_dtype(x_start.scalar_type()));
  MeanVariance out;
  out.mean = extract(tables_.sqrt_alphas_cumprod, t, x) * x;
  out.variance = (1.0 - extract(tables_.alphas_cumprod, t, x)).expand(x.sizes());
  out.log_variance = extract(tables_.log_one_minus_alphas_cumprod, t, x).expand(x.sizes());
  return out;
}

torch::Tensor GaussianDiffusion::q_sample(const torch::Tensor& x_start, const torch::Tensor& t,
                                          const torch::Tensor& noise) const {
  check_timesteps(t, x_start, "q_sample");
  if (noise.sizes() != x_start.sizes()) {
    throw Error(fmt::format("diffusion q_sample: noise of shape {} for x_start of shape {}",
                            fmt::join(noise.sizes(), "x"), fmt::join(x_start.sizes(), "x")));
  }
  const auto dtype = compute_dtype(x_start.scalar_type());
  const auto x = x_start.to(dtype);
  return extract(tables_.sqrt_alphas_cumprod, t, x) * x +
         extract(tables_.sqrt_one_minus_alphas_cumprod, t, x) * noise.to(dtype);
}

MeanVariance GaussianDiffusion::q_posterior_mean_variance(const torch::Tensor& x_start, const torch::Tensor& x_t,
                                                          const torch::Tensor& t) const {
  check_timesteps(t, x_t, "q_posterior_mean_variance");
  if (x_start.sizes() != x_t.sizes()) {
    throw Error(fmt::format("diffusion q_posterior_mean_variance: x_start {} and x_t {} differ in shape",
                            fmt::join(x_start.sizes(), "x"), fmt::join(x_t.sizes(), "x")));
  }
  const auto dtype = compute_dtype(x_t.scalar_type());
  const auto xt = x_t.to(dtype);
  MeanVariance out;
  out.mean = extract(tables_.posterior_mean_coef1, t, xt) * x_start.to(dtype) +
             extract(tables_.posterior_mean_coef2, t, xt) * xt;
  out.variance = extract(tables_.posterior_variance, t, xt).expand(xt.sizes());
  out.log_variance = extract(tables_.posterior_log_variance_clipped, t, xt).expand(xt.sizes());
  return out;
}

torch::Tensor GaussianDiffusion::predict_xstart_from_eps(const torch::Tensor& x_t, const torch::Tensor& t,
                                                         const torch::Tensor& eps) const {
  const auto dtype = compute_dtype(x_t.scalar_type());
  const auto xt = x_t.to(dtype);
  return extract(tables_.sqrt_recip_alphas_cumprod, t, xt) * xt -
         extract(tables_.sqrt_recipm1_alphas_cumprod, t, xt) * eps.to(dtype);
}

torch::Tensor GaussianDiffusion::predict_eps_from_xstart(const torch::Tensor& x_t, const torch::Tensor& t,
                                                         const torch::Tensor& pred_xstart) const {
  const auto dtype = compute_dtype(x_t.scalar_type());
  const auto xt = x_t.to(dtype);
  return (extract(tables_.sqrt_recip_alphas_cumprod, t, xt) * xt - pred_xstart.to(dtype)) /
         extract(tables_.sqrt_recipm1_alphas_cumprod, t, xt);
}

std::pair<torch::Tensor, torch::Tensor> GaussianDiffusion::split_output(const torch::Tensor& model_output,
                                                                        const torch::Tensor& x) const {
  const bool learned = options_.var_type == ModelVarType::Learned || options_.var_type == ModelVarType::LearnedRange;
  const int64_t dim = options_.channel_dim;
  if (x.dim() <= dim || model_output.dim() != x.dim()) {
    throw Error(fmt::format("diffusion: model output of shape {} for x of shape {} with channels on dim {}",
                            fmt::join(model_output.sizes(), "x"), fmt::join(x.sizes(), "x"), dim));
  }
  const int64_t channels = x.size(dim);
  auto expected = x.sizes().vec();
  if (learned) expected[dim] = 2 * channels;
  if (model_output.sizes().vec() != expected) {
    throw Error(fmt::format("diffusion: expected a model output of shape {} ({} channels on dim {}: {}), got {}",
                            fmt::join(expected, "x"), expected[dim], dim,
                            learned ? "the prediction then the variance values" : "the prediction",
                            fmt::join(model_output.sizes(), "x")));
  }
  if (!learned) return {model_output, torch::Tensor()};
  return {model_output.narrow(dim, 0, channels), model_output.narrow(dim, channels, channels)};
}

PredictedMeanVariance GaussianDiffusion::p_mean_variance(const torch::Tensor& model_output, const torch::Tensor& x,
                                                         const torch::Tensor& t, bool clip_denoised) const {
  check_timesteps(t, x, "p_mean_variance");
  const auto dtype = compute_dtype(x.scalar_type());
  const auto xt = x.to(dtype);
  auto [prediction, variance_values] = split_output(model_output.to(dtype), xt);
  PredictedMeanVariance out;
  switch (options_.var_type) {
    case ModelVarType::Learned:
      out.log_variance = variance_values;
      break;
    case ModelVarType::LearnedRange: {
      const auto min_log = extract(tables_.posterior_log_variance_clipped, t, xt);
      const auto max_log = extract(tables_.betas, t, xt).log();
      const auto fraction = (variance_values + 1.0) / 2.0;  // v in [-1, 1] -> [min, max]
      out.log_variance = fraction * max_log + (1.0 - fraction) * min_log;
      break;
    }
    case ModelVarType::FixedSmall:
      out.log_variance = extract(tables_.posterior_log_variance_clipped, t, xt).expand(xt.sizes());
      break;
    case ModelVarType::FixedLarge:
      out.log_variance = extract(fixed_large_variance_.log(), t, xt).expand(xt.sizes());
      break;
  }
  out.variance = torch::exp(out.log_variance);
  out.pred_xstart = options_.mean_type == ModelMeanType::StartX ? prediction
                                                                : predict_xstart_from_eps(xt, t, prediction);
  if (clip_denoised) out.pred_xstart = out.pred_xstart.clamp(-1.0, 1.0);
  out.mean = q_posterior_mean_variance(out.pred_xstart, xt, t).mean;
  return out;
}

PredictedMeanVariance GaussianDiffusion::p_mean_variance(const ModelFn& model, const torch::Tensor& x,
                                                         const torch::Tensor& t, bool clip_denoised) const {
  check_timesteps(t, x, "p_mean_variance");
  return p_mean_variance(model(x, original_timesteps(t)), x, t, clip_denoised);
}

torch::Tensor GaussianDiffusion::vb_terms_bpd(const torch::Tensor& model_output, const torch::Tensor& x_start,
                                              const torch::Tensor& x_t, const torch::Tensor& t,
                                              bool clip_denoised) const {
  const auto dtype = compute_dtype(x_t.scalar_type());
  const auto x0 = x_start.to(dtype);
  const auto truth = q_posterior_mean_variance(x0, x_t, t);
  const auto model = p_mean_variance(model_output, x_t, t, clip_denoised);
  const double log2 = std::log(2.0);
  const auto kl = mean_flat(normal_kl(truth.mean, truth.log_variance, model.mean, model.log_variance)) / log2;
  const auto decoder_nll =
      -mean_flat(discretized_gaussian_log_likelihood(x0, model.mean, 0.5 * model.log_variance)) / log2;
  return torch::where(t.to(kl.device()) == 0, decoder_nll, kl);
}

LossTerms GaussianDiffusion::training_losses(const ModelFn& model, const torch::Tensor& x_start,
                                             const torch::Tensor& t, const torch::Tensor& noise) const {
  const auto x_t = q_sample(x_start, t, noise);
  return training_losses_from_output(model(x_t, original_timesteps(t)), x_start, x_t, t, noise);
}

LossTerms GaussianDiffusion::training_losses_from_output(const torch::Tensor& model_output,
                                                         const torch::Tensor& x_start, const torch::Tensor& x_t,
                                                         const torch::Tensor& t, const torch::Tensor& noise) const {
  check_timesteps(t, x_t, "training_losses");
  const auto dtype = compute_dtype(x_t.scalar_type());
  const auto output = model_output.to(dtype);
  LossTerms terms;
  if (options_.loss_type == LossType::Kl || options_.loss_type == LossType::RescaledKl) {
    terms.vb = vb_terms_bpd(output, x_start, x_t, t, /*clip_denoised=*/false);
    if (options_.loss_type == LossType::RescaledKl) terms.vb = terms.vb * static_cast<double>(num_timesteps_);
    terms.loss = terms.vb;
    return terms;
  }
  auto [prediction, variance_values] = split_output(output, x_t);
  if (variance_values.defined()) {
    // The VB term sees the prediction as a constant, so it trains the variance channels only.
    const auto frozen = torch::cat({prediction.detach(), variance_values}, options_.channel_dim);
    terms.vb = vb_terms_bpd(frozen, x_start, x_t, t, /*clip_denoised=*/false);
    if (options_.loss_type == LossType::RescaledMse) {
      terms.vb = terms.vb * (static_cast<double>(num_timesteps_) / 1000.0);
    }
  }
  const auto target = options_.mean_type == ModelMeanType::Epsilon ? noise.to(dtype) : x_start.to(dtype);
  terms.mse = mean_flat((target - prediction).pow(2));
  terms.loss = terms.vb.defined() ? terms.mse + terms.vb : terms.mse;
  return terms;
}

GaussianDiffusion create_diffusion(const DiffusionOptions& options) {
  const auto betas = named_beta_schedule(options.noise_schedule, options.diffusion_steps);
  auto kept = space_timesteps(options.diffusion_steps, options.timestep_respacing);
  auto kept_betas = respaced_betas(betas, kept);  // before `kept` is moved from
  return GaussianDiffusion(kept_betas, options.process, std::move(kept), options.diffusion_steps);
}

}  // namespace tune::diffusion
