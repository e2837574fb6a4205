// Uniform timestep sampling for the diffusion training loss.
#include "tune/diffusion/timestep_sampler.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <torch/torch.h>

namespace tune::diffusion {

UniformTimestepSampler::UniformTimestepSampler(int64_t num_timesteps) : num_timesteps_(num_timesteps) {
  if (num_timesteps < 1) {
    throw UsageError(fmt::format("diffusion: the timestep sampler needs at least 1 timestep, got {}", num_timesteps));
  }
}

UniformTimestepSampler::Draw UniformTimestepSampler::sample(int64_t batch_size, at::Generator& generator,
                                                            torch::Device device) const {
  const auto on_generator = torch::TensorOptions().dtype(torch::kLong).device(generator.device());
  Draw draw;
  draw.timesteps = torch::randint(0, num_timesteps_, {batch_size}, generator, on_generator).to(device);
  draw.weights = torch::ones({batch_size}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  return draw;
}

}  // namespace tune::diffusion
