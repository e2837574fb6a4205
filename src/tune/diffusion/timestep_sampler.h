// Training timesteps drawn uniformly, as Latte's train.py (torch.randint(0, T, (B,))), from a seeded generator.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>

namespace tune::diffusion {

class UniformTimestepSampler {
 public:
  explicit UniformTimestepSampler(int64_t num_timesteps);

  struct Draw {
    torch::Tensor timesteps;  // int64 [B] in [0, num_timesteps)
    torch::Tensor weights;    // float32 [B], all 1 (importance weights of a uniform draw)
  };
  // Drawn on the generator's device (same numbers as torch.randint with that generator), then moved to `device`.
  Draw sample(int64_t batch_size, at::Generator& generator, torch::Device device = torch::kCPU) const;

  int64_t num_timesteps() const { return num_timesteps_; }

 private:
  int64_t num_timesteps_;
};

}  // namespace tune::diffusion
