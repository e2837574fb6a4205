// DPM-Solver++ multistep (Lu et al. 2022, "DPM-Solver++: Fast Solver for Guided Sampling of Diffusion Probabilistic
// Models"), deterministic, in the data-prediction form of diffusers' DPMSolverMultistepScheduler with
// algorithm_type "dpmsolver++": each step takes the model's x_0 prediction at the current sigma and moves the
// sample to the next sigma, using the previous step's x_0 prediction for the second-order correction.
//
// With alpha = 1 / sqrt(sigma^2 + 1), s = sigma * alpha (the noise scale of x_t = alpha x_0 + s eps),
// lambda = log(alpha / s) and h = lambda_next - lambda_now:
//   first order:  x' = (s_next / s_now) x - alpha_next (e^-h - 1) D0                      (DDIM)
//   second order: x' = (s_next / s_now) x - alpha_next (e^-h - 1) (D0 + D1 / 2)            (midpoint)
//                 x' = (s_next / s_now) x - alpha_next (e^-h - 1) D0 + alpha_next ((e^-h - 1) / h + 1) D1   (heun)
// with D0 the current x_0 prediction and D1 = (D0 - previous) h / h_previous.
// On flow sigmas (diffusers' use_flow_sigmas, Sana) the same formulas run with alpha = 1 - sigma and s = sigma, the
// process x_t = (1 - sigma) x_0 + sigma eps of a flow-matching model.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace tune::diffusion {

enum class DpmSecondOrder { midpoint, heun };

struct DpmSolverOptions {
  int64_t order = 2;                                // 1 or 2
  DpmSecondOrder second_order = DpmSecondOrder::midpoint;
  bool lower_order_final = true;                    // first order at the last step when there are < 15 steps
  bool euler_at_final = false;                      // first order at the last step always
  bool flow_sigmas = false;                         // alpha = 1 - sigma, s = sigma (else the DDPM process's)
};

// One sampling run: construct, then call step(0), step(1), ... in order (the solver keeps the last x_0 prediction).
class DpmSolverMultistep {
 public:
  struct NoiseLevel {
    double alpha;   // scale of x_0 in x_t
    double scale;   // scale of the noise in x_t
    double lambda;  // log(alpha / scale), the half log-SNR; +infinity at sigma 0
  };

  // sigmas [steps + 1]: sqrt((1 - alpha_bar) / alpha_bar) at each step's timestep (or the flow sigmas), then the
  // final sigma (0 means the last step lands on the prediction x_0 itself, and is always first order). Throws
  // tune::Error when sigmas has fewer than 2 entries, a negative entry (or, on flow sigmas, one >= 1), or an order
  // other than 1 or 2.
  DpmSolverMultistep(std::vector<double> sigmas, DpmSolverOptions options);

  int64_t num_steps() const { return static_cast<int64_t>(sigmas_.size()) - 1; }
  // alpha and s (the x_0 and the noise scale of the sample) at step i's sigma, to turn an eps or v prediction
  // into x_0: x_0 = (x - s eps) / alpha, or alpha x - s v; on flow sigmas s is sigma, and a flow prediction
  // v = eps - x_0 gives x_0 = x - s v.
  double alpha(int64_t step) const;
  double noise_scale(int64_t step) const;

  // The sample at step + 1 from x at `step` and the model's x_0 prediction there (both detached; computed in x's
  // dtype). Throws tune::Error when steps are taken out of order.
  torch::Tensor step(int64_t step, const torch::Tensor& x, const torch::Tensor& predicted_x0);

 private:
  bool first_order_at(int64_t step) const;
  NoiseLevel noise_level(double sigma) const;

  std::vector<double> sigmas_;
  DpmSolverOptions options_;
  int64_t next_step_ = 0;
  torch::Tensor previous_x0_;
};

}  // namespace tune::diffusion
