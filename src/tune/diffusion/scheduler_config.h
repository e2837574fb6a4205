// A diffusers scheduler_config.json (a pipeline's scheduler/ directory) for the two schedulers tune samples with,
// DDIMScheduler and DPMSolverMultistepScheduler, and what it defines as diffusers 0.42 computes it: the training
// process's betas and alpha_bar, and the timesteps of an n-step sampler. Sampling itself is in
// scheduler_sampler.h.
//
// diffusers builds its tables in float32 (torch.linspace, torch.cumprod); tune keeps those float32 values (as
// doubles), so the tables are bit-equal to diffusers' and only the per-step arithmetic, done in double, differs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace tune::diffusion {

enum class SchedulerKind {
  ddim,                  // DDIMScheduler
  dpm_solver_multistep,  // DPMSolverMultistepScheduler (dpmsolver++, order 1 or 2)
};

// The settings tune acts on. Defaults are diffusers' defaults for DDIMScheduler; a DPMSolverMultistepScheduler
// file that omits timestep_spacing reads "linspace", its class's default.
struct SchedulerConfig {
  SchedulerKind kind = SchedulerKind::ddim;
  std::string class_name = "DDIMScheduler";  // _class_name
  std::filesystem::path source;               // the file it was read from ("" when built in code), for messages

  // The training process.
  int64_t num_train_timesteps = 1000;
  double beta_start = 0.0001;
  double beta_end = 0.02;
  std::string beta_schedule = "linear";     // "linear" | "scaled_linear" (linear in sqrt(beta)) | "squaredcos_cap_v2"
  std::vector<double> trained_betas;        // non-empty: these betas instead of beta_schedule
  std::string prediction_type = "epsilon";  // what the model outputs: "epsilon" | "v_prediction" | "sample" (x_0)
  // DDPMScheduler's variance_type, which diffusers keeps as a hidden key when a config carries it (Latte-1's
  // DDIM config: "learned_range"); "" when null or absent. Sampling never uses it: the caller decides from it
  // (learned_variance()) whether the model's output holds variance channels to drop.
  std::string variance_type;

  // The inference timesteps.
  std::string timestep_spacing = "leading";  // "leading" | "trailing" | "linspace"
  int64_t steps_offset = 0;                  // added to "leading" timesteps

  // DDIMScheduler: the last step goes to alpha_bar 1 (true) or to alpha_bar[0] (false).
  bool set_alpha_to_one = true;

  // DPMSolverMultistepScheduler.
  int64_t solver_order = 2;                    // 1 (DDIM-like) | 2 (DPM-Solver++ 2M)
  std::string algorithm_type = "dpmsolver++";  // the only one tune implements
  std::string solver_type = "midpoint";        // second-order formula: "midpoint" | "heun"
  bool lower_order_final = true;               // first order at the last step when sampling with < 15 steps
  bool euler_at_final = false;                 // first order at the last step always
  std::string final_sigmas_type = "zero";      // the last step goes to sigma 0 ("zero") or sigma at t = 0 ("sigma_min")
  double lambda_min_clipped = -std::numeric_limits<double>::infinity();  // log-SNR below which no timestep is used

  // variance_type says the model's output holds a learned variance beside the prediction ("learned",
  // "learned_range").
  bool learned_variance() const { return variance_type == "learned" || variance_type == "learned_range"; }
};

// Reads scheduler_config.json as written by diffusers' save_config (Python's JSON: -Infinity is read). Throws
// tune::InputError naming the file and the key for: a missing or malformed file; a _class_name other than the
// two above ("not implemented yet"); a setting tune does not implement (clip_sample or thresholding true,
// rescale_betas_zero_snr, karras / exponential / beta / lu / flow sigmas, solver_order 3, an algorithm_type
// other than dpmsolver++, ...: diffusers' own default counts, so a DDIM file without "clip_sample": false is
// refused); a wrong type or value; and a key that no diffusers 0.42 scheduler has. Keys starting with "_" are
// metadata; keys of the other diffusers schedulers (which diffusers keeps as hidden entries, e.g. a DDIM config
// that was once a DPM-Solver one) are accepted and have no effect, as in diffusers.
SchedulerConfig read_scheduler_config(const std::filesystem::path& json);
// The same for a parsed object; `source` names it in errors.
SchedulerConfig parse_scheduler_config(const nlohmann::json& json, const std::filesystem::path& source);

// The training betas, [num_train_timesteps]: torch.linspace(beta_start, beta_end) in float32 ("linear"),
// its square over sqrt(beta_start)..sqrt(beta_end) ("scaled_linear"), the capped cosine alpha_bar computed in
// double and rounded to float32 ("squaredcos_cap_v2"), or trained_betas in float32. Throws tune::InputError naming
// the file and key when a beta falls outside (0, 1).
std::vector<double> scheduler_betas(const SchedulerConfig& config);
// alpha_bar = cumprod(1 - beta), accumulated in float32 as diffusers does, [num_train_timesteps].
std::vector<double> scheduler_alphas_cumprod(const SchedulerConfig& config);

// The timesteps an n-step sampler visits, descending: diffusers' scheduler.set_timesteps(n); scheduler.timesteps.
// DDIM: "leading" (0, r, 2r, ... with r = T // n, plus steps_offset), "trailing" (round(T - i T/n) - 1),
// "linspace" (round(linspace(0, T - 1, n))). DPM-Solver takes n + 1 points and drops the last (t = 0 for
// "leading" and "linspace"), and ends its schedule where lambda_min_clipped cuts it. Throws tune::UsageError
// for n < 1 or n > num_train_timesteps.
std::vector<int64_t> scheduler_timesteps(const SchedulerConfig& config, int64_t num_inference_steps);

// DPMSolverMultistepScheduler's sigmas for n steps, [n + 1]: sqrt((1 - alpha_bar) / alpha_bar) (in float32) at
// each timestep, then the final sigma (0, or sigma at t = 0 for "sigma_min").
std::vector<double> scheduler_sigmas(const SchedulerConfig& config, int64_t num_inference_steps);

}  // namespace tune::diffusion
