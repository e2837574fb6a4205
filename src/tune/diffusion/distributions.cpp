// Gaussian KL and the discretized Gaussian likelihood of the variational bound.
#include "tune/diffusion/distributions.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>

namespace tune::diffusion {

torch::Tensor normal_kl(const torch::Tensor& mean1, const torch::Tensor& log_variance1, const torch::Tensor& mean2,
                        const torch::Tensor& log_variance2) {
  return 0.5 * (-1.0 + log_variance2 - log_variance1 + torch::exp(log_variance1 - log_variance2) +
                (mean1 - mean2).pow(2) * torch::exp(-log_variance2));
}

torch::Tensor approx_standard_normal_cdf(const torch::Tensor& x) {
  return 0.5 * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
}

torch::Tensor discretized_gaussian_log_likelihood(const torch::Tensor& x, const torch::Tensor& means,
                                                  const torch::Tensor& log_scales) {
  if (x.sizes() != means.sizes() || x.sizes() != log_scales.sizes()) {
    throw Error(fmt::format("diffusion: discretized Gaussian likelihood needs equal shapes, got x {}, means {}, "
                            "log_scales {}",
                            fmt::join(x.sizes(), "x"), fmt::join(means.sizes(), "x"), fmt::join(log_scales.sizes(), "x")));
  }
  const auto centered = x - means;
  const auto inverse_std = torch::exp(-log_scales);
  const auto cdf_plus = approx_standard_normal_cdf(inverse_std * (centered + 1.0 / 255.0));
  const auto cdf_min = approx_standard_normal_cdf(inverse_std * (centered - 1.0 / 255.0));
  const auto log_cdf_plus = torch::log(cdf_plus.clamp_min(1e-12));
  const auto log_one_minus_cdf_min = torch::log((1.0 - cdf_min).clamp_min(1e-12));
  const auto log_cdf_delta = torch::log((cdf_plus - cdf_min).clamp_min(1e-12));
  return torch::where(x < -0.999, log_cdf_plus, torch::where(x > 0.999, log_one_minus_cdf_min, log_cdf_delta));
}

}  // namespace tune::diffusion
