// What the autoencoders' video helpers share (AutoencoderKL, AutoencoderDC): frames [B, F, ...] flattened to
// [B*F, ...] and run through the model a chunk at a time, each chunk moved to the model's device and dtype, the
// results gathered in the input's device and dtype, so a long CPU video needs one chunk's activations on the GPU.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tune::models {

// Throws std::invalid_argument unless `video` is [B, F, channels, H, W] and chunk_size > 0. `model` and `what`
// name the caller and the argument in the message.
inline void check_frames(const torch::Tensor& video, int64_t channels, int64_t chunk_size, const char* model,
                         const char* what) {
  if (video.dim() != 5 || video.size(2) != channels) {
    throw std::invalid_argument(fmt::format("{}: {} must be [B, F, {}, H, W], got [{}]", model, what, channels,
                                            fmt::join(video.sizes(), ", ")));
  }
  if (chunk_size <= 0) {
    throw std::invalid_argument(fmt::format("{}: chunk_size must be positive, got {}", model, chunk_size));
  }
}

// The model's first parameter: where its device and dtype are read from.
inline torch::Tensor first_parameter(torch::nn::Module& module) {
  for (const auto& parameter : module.parameters()) return parameter;
  throw std::logic_error("the model has no parameters");
}

// Runs `step(chunk, begin, end)` on [N, ...] slices of `flat` of at most chunk_size rows, each moved to the model's
// device and dtype, and gathers the results in `flat`'s device and dtype (allocated once the first chunk's shape is
// known).
template <typename Step>
torch::Tensor run_in_chunks(const torch::Tensor& flat, int64_t chunk_size, const torch::Tensor& model_parameter,
                            Step step) {
  const int64_t total = flat.size(0);
  torch::Tensor output;
  for (int64_t begin = 0; begin < total; begin += chunk_size) {
    const int64_t end = std::min(total, begin + chunk_size);
    const auto chunk = flat.slice(0, begin, end).to(model_parameter.device(), model_parameter.scalar_type());
    const torch::Tensor result = step(chunk, begin, end);
    if (!output.defined()) {
      std::vector<int64_t> shape = result.sizes().vec();
      shape[0] = total;
      output = torch::empty(shape, flat.options());
    }
    output.slice(0, begin, end).copy_(result);
  }
  return output;
}

}  // namespace tune::models
