// A diffusers scheduler_config.json (a pipeline's scheduler/ directory) for the schedulers tune samples with,
// DDIMScheduler, DPMSolverMultistepScheduler (on a DDPM process, or on flow sigmas as Sana's pipelines ship it) and
// FlowMatchEulerDiscreteScheduler, and what it defines as diffusers 0.42 computes it: the training process's betas
// and alpha_bar, and the timesteps and sigmas of an n-step sampler. Sampling itself is in scheduler_sampler.h.
//
// diffusers builds its tables in float32 (torch.linspace, torch.cumprod); tune keeps those float32 values (as
// doubles), so the tables are bit-equal to diffusers' and only the per-step arithmetic, done in double, differs.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace tune::diffusion {

enum class SchedulerKind {
  ddim,                  // DDIMScheduler
  dpm_solver_multistep,  // DPMSolverMultistepScheduler (dpmsolver++, order 1 or 2; DDPM or flow sigmas)
  flow_match_euler,      // FlowMatchEulerDiscreteScheduler (deterministic Euler steps of a flow model)
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
  // What the model outputs: "epsilon" | "v_prediction" | "sample" (x_0) | "flow_prediction" (v = eps - x_0, the
  // velocity of x_t = (1 - sigma) x_0 + sigma eps; DPM-Solver with use_flow_sigmas only, and what
  // FlowMatchEulerDiscreteScheduler always assumes).
  std::string prediction_type = "epsilon";
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
  // Flow sigmas (Sana): sigma = 1 - alpha on linspace(1, 1/T, n + 1), shifted, instead of the DDPM process's; the
  // sample is x_t = (1 - sigma) x_0 + sigma eps, and the betas only give final_sigmas_type "sigma_min" its value.
  bool use_flow_sigmas = false;

  // The flow shift s of sigma' = s sigma / (1 + (s - 1) sigma) (> 0; 1: unshifted; larger: more steps at high
  // noise): DPM-Solver's flow_shift (with use_flow_sigmas), FlowMatchEulerDiscreteScheduler's shift.
  double flow_shift = 1.0;

  // variance_type says the model's output holds a learned variance beside the prediction ("learned",
  // "learned_range").
  bool learned_variance() const { return variance_type == "learned" || variance_type == "learned_range"; }
  // The sample is x_t = (1 - sigma) x_0 + sigma eps (a flow-matching model's process), not a DDPM one.
  bool flow() const { return kind == SchedulerKind::flow_match_euler || use_flow_sigmas; }
};

// Reads scheduler_config.json as written by diffusers' save_config (Python's JSON: -Infinity is read). Throws
// tune::InputError naming the file and the key for: a missing or malformed file; a _class_name other than the
// three above ("not implemented yet"); a setting tune does not implement (clip_sample or thresholding true,
// rescale_betas_zero_snr, karras / exponential / beta / lu sigmas, dynamic shifting, solver_order 3, an
// algorithm_type other than dpmsolver++, flow sigmas with a prediction other than flow_prediction or the reverse,
// FlowMatchEuler's shift_terminal, invert_sigmas or stochastic_sampling, ...: diffusers' own default counts, so a
// DDIM file without "clip_sample": false is refused); a wrong type or value; and a key that no diffusers 0.42
// scheduler has. Keys starting with "_" are
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

// The timesteps an n-step sampler visits, descending: diffusers' scheduler.set_timesteps(n); scheduler.timesteps,
// for the schedulers whose timesteps are integers (all but FlowMatchEuler, for which this throws
// tune::UsageError: use scheduler_model_timesteps).
// DDIM: "leading" (0, r, 2r, ... with r = T // n, plus steps_offset), "trailing" (round(T - i T/n) - 1),
// "linspace" (round(linspace(0, T - 1, n))). DPM-Solver takes n + 1 points and drops the last (t = 0 for
// "leading" and "linspace"), and ends its schedule where lambda_min_clipped cuts it. DPM-Solver on flow sigmas:
// trunc(sigma_i T) of its (double) sigmas, whatever timestep_spacing says; many steps with a large shift can
// repeat a timestep (diffusers allows that too). Throws tune::UsageError for n < 1 or n > num_train_timesteps.
std::vector<int64_t> scheduler_timesteps(const SchedulerConfig& config, int64_t num_inference_steps);

// The timesteps as diffusers hands them to the model, [n] on the CPU: int64 (scheduler_timesteps) for DDIM and
// DPM-Solver, float32 for FlowMatchEuler (its float32 sigmas times T, e.g. 1000, 947.4, ...).
torch::Tensor scheduler_model_timesteps(const SchedulerConfig& config, int64_t num_inference_steps);

// The sigmas of DPM-Solver and FlowMatchEuler for n steps, [n + 1], float32 values (as doubles) as diffusers
// stores them, the last the final sigma. DPM-Solver on the DDPM process: sqrt((1 - alpha_bar) / alpha_bar) at
// each timestep, then 0 or (final_sigmas_type "sigma_min") that sigma at t = 0. DPM-Solver on flow sigmas:
// shift(1 - a_i) for a = linspace(1, 1/T, n + 1) reversed, the last point dropped, then the final sigma as above.
// FlowMatchEuler: shift(linspace(T shift(1), T shift(1/T), n) / T) (diffusers shifts the endpoints of its
// training table, then the points again), then 0. Throws tune::UsageError for a DDIM config.
std::vector<double> scheduler_sigmas(const SchedulerConfig& config, int64_t num_inference_steps);

}  // namespace tune::diffusion
