#include "tune/nn/glumb_conv.h"

#include <torch/torch.h>

namespace tune::nn {

GLUMBConvImpl::GLUMBConvImpl(const GLUMBConvOptions& options_) : options(options_) { reset(); }

void GLUMBConvImpl::reset() {
  const auto hidden = options.hidden_channels();
  conv_inverted = register_module(
      "conv_inverted", torch::nn::Conv2d(torch::nn::Conv2dOptions(options.in_channels(), 2 * hidden, 1)));
  conv_depth = register_module("conv_depth", torch::nn::Conv2d(torch::nn::Conv2dOptions(2 * hidden, 2 * hidden, 3)
                                                                   .padding(1)
                                                                   .groups(2 * hidden)));
  conv_point = register_module(
      "conv_point", torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, options.out_channels(), 1).bias(false)));
}

torch::Tensor GLUMBConvImpl::forward(const torch::Tensor& x) {
  auto h = conv_depth->forward(torch::silu(conv_inverted->forward(x)));
  auto halves = h.chunk(2, 1);
  return conv_point->forward(halves[0] * torch::silu(halves[1]));
}

}  // namespace tune::nn
