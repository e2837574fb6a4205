// The Gaussian pieces of the variational bound (Latte's diffusion_utils.py): KL between diagonal Gaussians and
// the discretized Gaussian log-likelihood used as the decoder term at t = 0. Elementwise, no reduction, in nats.
#pragma once

#include <torch/types.h>

namespace tune::diffusion {

// KL(N(mean1, exp(log_variance1)) || N(mean2, exp(log_variance2))), broadcasting.
torch::Tensor normal_kl(const torch::Tensor& mean1, const torch::Tensor& log_variance1, const torch::Tensor& mean2,
                        const torch::Tensor& log_variance2);

// The tanh approximation of the standard normal CDF that the reference uses (kept for bit-compatible losses):
// 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
torch::Tensor approx_standard_normal_cdf(const torch::Tensor& x);

// log P(x) for x assumed to be uint8 data rescaled to [-1, 1]: the Gaussian's mass on the bin x +- 1/255, with the
// outer bins (x < -0.999, x > 0.999) extended to -inf / +inf; probabilities clamped at 1e-12.
// All three tensors have the same shape.
torch::Tensor discretized_gaussian_log_likelihood(const torch::Tensor& x, const torch::Tensor& means,
                                                  const torch::Tensor& log_scales);

}  // namespace tune::diffusion
