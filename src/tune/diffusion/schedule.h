// Noise schedules and timestep respacing, as Latte's diffusion package (OpenAI improved-diffusion) defines them:
// the betas of the forward process and which of its timesteps a shorter sampler keeps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tune::diffusion {

// "linear": Ho et al.'s 1e-4 .. 0.02 for 1000 steps, both ends scaled by 1000 / num_steps so other step counts
// keep the same overall noise; "squaredcos_cap_v2": Nichol & Dhariwal's cosine alpha_bar, each beta capped at
// 0.999. Computed in double. Throws tune::UsageError for an unknown name or num_steps < 1.
std::vector<double> named_beta_schedule(const std::string& name, int64_t num_steps);

// Betas that discretize alpha_bar(s), s in [0, 1]: beta_i = min(1 - alpha_bar((i+1)/n) / alpha_bar(i/n), max_beta).
std::vector<double> betas_for_alpha_bar(int64_t num_steps, const std::function<double(double)>& alpha_bar,
                                        double max_beta = 0.999);

// The timesteps of a num_timesteps process that a respaced process keeps, ascending.
// section_counts: "ddimN" (the DDIM paper's fixed integer stride giving exactly N steps), or comma-separated
// counts "10,15,20" (the process split into equal sections, each strided to its count; positions are rounded
// half-to-even like Python's round()). "" keeps every step. Throws tune::UsageError when impossible.
// Latte's sample.py samples with "N" for DDPM and DDIM alike (create_diffusion(str(N))): 0, 20, 41, ..., 999 at 50.
std::vector<int64_t> space_timesteps(int64_t num_timesteps, const std::string& section_counts);
std::vector<int64_t> space_timesteps(int64_t num_timesteps, const std::vector<int64_t>& section_counts);

// The betas of the process that keeps only use_timesteps (ascending) of base_betas: consecutive kept
// alphas_cumprod give beta = 1 - alpha_bar[kept_i] / alpha_bar[kept_{i-1}], so alphas_cumprod are unchanged.
std::vector<double> respaced_betas(const std::vector<double>& base_betas, const std::vector<int64_t>& use_timesteps);

}  // namespace tune::diffusion
