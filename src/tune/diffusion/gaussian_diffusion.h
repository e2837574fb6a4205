// The Gaussian diffusion process of Latte (OpenAI improved-diffusion / DiT): schedule tables in float64, the
// forward process q, the model's reverse step p, and the training loss (eps MSE plus, for a learned variance, the
// variational-bound term). A respaced process (fewer steps for sampling) is the same class built from the kept
// timesteps; it maps its timesteps back to the original ones before calling the model.
//
// Tensors are [B, ...] with channels on `channel_dim` (Latte's videos: [B, F, C, H, W], channel_dim 2). Timesteps
// t are int64 [B] indices into *this* process (0 .. num_timesteps - 1). Results are computed in float64 when x is
// float64 and in float32 otherwise (the reference casts its coefficients to float32), whatever the model's dtype.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tune::diffusion {

enum class ModelMeanType { Epsilon, StartX };  // the model predicts the noise, or x_0
enum class ModelVarType {
  FixedSmall,    // the posterior variance (beta tilde), log clipped at t = 0
  FixedLarge,    // beta_t (posterior variance at t = 0)
  Learned,       // extra C channels are the log variance
  LearnedRange,  // extra C channels v in [-1, 1]: log var = (v+1)/2 * log(beta_t) + (1-v)/2 * log(beta tilde_t)
};
enum class LossType {
  Mse,          // mean eps MSE (+ VB term in bits for learned variances): what Latte trains with
  RescaledMse,  // as Mse, with the VB term times num_timesteps / 1000
  Kl,           // the VB term alone
  RescaledKl,   // the VB term times num_timesteps
};

// The raw model: x [B, ...] and the *original* timesteps [B] -> output with C (fixed variance) or 2C channels.
using ModelFn = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t)>;

struct ProcessOptions {
  ModelMeanType mean_type = ModelMeanType::Epsilon;
  ModelVarType var_type = ModelVarType::LearnedRange;  // Latte: learn_sigma=True
  LossType loss_type = LossType::Mse;
  int64_t channel_dim = 2;  // where C sits in x and in the model output; 2 for [B, F, C, H, W]
};

// Everything Latte's create_diffusion takes.
struct DiffusionOptions {
  std::string noise_schedule = "linear";  // "linear" | "squaredcos_cap_v2"
  int64_t diffusion_steps = 1000;         // of the base (training) process
  std::string timestep_respacing;         // "" keeps every step; "ddim50", "250", "10,15,20" for sampling
  ProcessOptions process;
};

// Per-timestep tables, each float64 [num_timesteps] on the CPU.
struct ScheduleTables {
  torch::Tensor betas;
  torch::Tensor alphas_cumprod;                  // prod_{s<=t} (1 - beta_s)
  torch::Tensor alphas_cumprod_prev;             // alphas_cumprod[t-1], 1 at t = 0
  torch::Tensor alphas_cumprod_next;             // alphas_cumprod[t+1], 0 at the last step
  torch::Tensor sqrt_alphas_cumprod;
  torch::Tensor sqrt_one_minus_alphas_cumprod;
  torch::Tensor log_one_minus_alphas_cumprod;
  torch::Tensor sqrt_recip_alphas_cumprod;       // 1 / sqrt(alpha_bar)
  torch::Tensor sqrt_recipm1_alphas_cumprod;     // sqrt(1 / alpha_bar - 1)
  torch::Tensor posterior_variance;              // beta_t (1 - alpha_bar_{t-1}) / (1 - alpha_bar_t)
  torch::Tensor posterior_log_variance_clipped;  // log posterior_variance, with t = 0 taking t = 1's value
  torch::Tensor posterior_mean_coef1;            // beta_t sqrt(alpha_bar_{t-1}) / (1 - alpha_bar_t)   (x_0)
  torch::Tensor posterior_mean_coef2;            // (1 - alpha_bar_{t-1}) sqrt(1 - beta_t) / (1 - alpha_bar_t)   (x_t)

  static ScheduleTables from_betas(const std::vector<double>& betas);
  // A process whose step i goes from alpha_bar_i to alphas_cumprod_prev[i], which need not be alpha_bar_{i-1}:
  // diffusers' DDIMScheduler steps from t to t - T // n whatever the spacing, and at the end to alpha_bar 1 or
  // alpha_bar[0]. beta_i = 1 - alpha_bar_i / alpha_bar_prev_i (0 allowed: a step that stays put); every per-step
  // table follows from the pair. Throws tune::Error unless 0 < alpha_bar_i <= alpha_bar_prev_i <= 1.
  static ScheduleTables from_alphas_cumprod(const std::vector<double>& alphas_cumprod,
                                            const std::vector<double>& alphas_cumprod_prev);
};

struct MeanVariance {
  torch::Tensor mean;
  torch::Tensor variance;
  torch::Tensor log_variance;
};

struct PredictedMeanVariance {
  torch::Tensor mean;          // of p(x_{t-1} | x_t)
  torch::Tensor variance;
  torch::Tensor log_variance;
  torch::Tensor pred_xstart;   // the x_0 the mean was derived from (after clipping)
};

// Per-sample terms, each [B]; `mse` is undefined for the KL loss types, `vb` for fixed variances.
struct LossTerms {
  torch::Tensor loss;
  torch::Tensor mse;
  torch::Tensor vb;
};

class GaussianDiffusion {
 public:
  // betas in (0, 1]; timestep_map[i] is the original timestep of step i (empty: identity, the process is not
  // respaced); original_num_steps defaults to betas.size().
  GaussianDiffusion(const std::vector<double>& betas, ProcessOptions options, std::vector<int64_t> timestep_map = {},
                    int64_t original_num_steps = 0);
  // The same from tables already built (ScheduleTables::from_alphas_cumprod); betas in [0, 1].
  GaussianDiffusion(ScheduleTables tables, ProcessOptions options, std::vector<int64_t> timestep_map = {},
                    int64_t original_num_steps = 0);

  int64_t num_timesteps() const { return num_timesteps_; }
  int64_t original_num_steps() const { return original_num_steps_; }
  const std::vector<int64_t>& timestep_map() const { return timestep_map_; }
  const ScheduleTables& tables() const { return tables_; }
  const ProcessOptions& options() const { return options_; }

  // This process's timesteps [B] -> the original process's (what the model was trained on).
  torch::Tensor original_timesteps(const torch::Tensor& t) const;

  // table[t] shaped [B, 1, ..., 1] to broadcast against `like`, in the compute dtype of `like`, on its device.
  torch::Tensor extract(const torch::Tensor& table, const torch::Tensor& t, const torch::Tensor& like) const;

  // q(x_t | x_0): mean sqrt(alpha_bar) x_0, variance 1 - alpha_bar.
  MeanVariance q_mean_variance(const torch::Tensor& x_start, const torch::Tensor& t) const;
  // A draw from q(x_t | x_0) with the given standard-normal noise: sqrt(alpha_bar) x_0 + sqrt(1 - alpha_bar) noise.
  torch::Tensor q_sample(const torch::Tensor& x_start, const torch::Tensor& t, const torch::Tensor& noise) const;
  // q(x_{t-1} | x_t, x_0); log_variance is posterior_log_variance_clipped.
  MeanVariance q_posterior_mean_variance(const torch::Tensor& x_start, const torch::Tensor& x_t,
                                         const torch::Tensor& t) const;

  torch::Tensor predict_xstart_from_eps(const torch::Tensor& x_t, const torch::Tensor& t, const torch::Tensor& eps) const;
  torch::Tensor predict_eps_from_xstart(const torch::Tensor& x_t, const torch::Tensor& t,
                                        const torch::Tensor& pred_xstart) const;

  // p(x_{t-1} | x_t) from a raw model output for (x, t); clip_denoised clamps pred_xstart to [-1, 1].
  PredictedMeanVariance p_mean_variance(const torch::Tensor& model_output, const torch::Tensor& x,
                                        const torch::Tensor& t, bool clip_denoised) const;
  // Calls model(x, original_timesteps(t)) first.
  PredictedMeanVariance p_mean_variance(const ModelFn& model, const torch::Tensor& x, const torch::Tensor& t,
                                        bool clip_denoised) const;

  // The VB term in bits per dimension, [B]: KL(q(x_{t-1}|x_t,x_0) || p(x_{t-1}|x_t)) averaged over non-batch dims,
  // and at t == 0 the discretized-Gaussian decoder NLL of x_0 instead; both divided by log 2.
  torch::Tensor vb_terms_bpd(const torch::Tensor& model_output, const torch::Tensor& x_start, const torch::Tensor& x_t,
                             const torch::Tensor& t, bool clip_denoised = false) const;

  // Training terms for one timestep per sample: x_t = q_sample(x_start, t, noise), output = model(x_t, original t).
  // Mse/RescaledMse: mse = mean over non-batch dims of (target - prediction)^2 (target: noise for Epsilon, x_0 for
  // StartX); for learned variances vb = vb_terms_bpd of [prediction.detach(), variance channels] (the VB term
  // trains only the variance), times num_timesteps / 1000 for RescaledMse; loss = mse + vb.
  // Kl/RescaledKl: loss = vb of the whole output (times num_timesteps for RescaledKl).
  LossTerms training_losses(const ModelFn& model, const torch::Tensor& x_start, const torch::Tensor& t,
                            const torch::Tensor& noise) const;
  // The same from an output already computed for x_t = q_sample(x_start, t, noise).
  LossTerms training_losses_from_output(const torch::Tensor& model_output, const torch::Tensor& x_start,
                                        const torch::Tensor& x_t, const torch::Tensor& t,
                                        const torch::Tensor& noise) const;

  // Splits a 2C-channel output into (prediction, variance values); throws tune::Error naming both shapes when
  // the output does not have the channels the options imply.
  std::pair<torch::Tensor, torch::Tensor> split_output(const torch::Tensor& model_output, const torch::Tensor& x) const;

 private:
  void check_timesteps(const torch::Tensor& t, const torch::Tensor& x, const char* what) const;

  ProcessOptions options_;
  ScheduleTables tables_;
  int64_t num_timesteps_ = 0;
  int64_t original_num_steps_ = 0;
  std::vector<int64_t> timestep_map_;
  torch::Tensor timestep_map_tensor_;  // int64 [num_timesteps]
  torch::Tensor fixed_large_variance_;  // float64: posterior_variance[1], betas[1:]
};

// Latte's create_diffusion: the named schedule over diffusion_steps, respaced by timestep_respacing.
GaussianDiffusion create_diffusion(const DiffusionOptions& options);

// The dtype results are computed in for an input of dtype `dtype`: float64 stays, everything else is float32.
torch::ScalarType compute_dtype(torch::ScalarType dtype);

// Mean over all dimensions but the first.
torch::Tensor mean_flat(const torch::Tensor& tensor);

}  // namespace tune::diffusion
