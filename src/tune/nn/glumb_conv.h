// GLUMBConv, the feed-forward of Sana's blocks and of DC-AE's EfficientViT blocks (diffusers' GLUMBConv, the
// official Sana GLUMBConv): a 1x1 conv to 2h channels, SiLU, a depthwise 3x3 conv, then the first half gated by
// SiLU of the second, and a bias-free 1x1 conv back. Names as diffusers': conv_inverted, conv_depth, conv_point.
// DC-AE's variant adds an RMSNorm and a residual around it; those stay with DC-AE's block.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace tune::nn {

struct GLUMBConvOptions {
  GLUMBConvOptions(int64_t in_channels, int64_t out_channels, double expand_ratio)
      : in_channels_(in_channels), out_channels_(out_channels), expand_ratio_(expand_ratio) {}
  // int(expand_ratio * in_channels), truncated as Python's int().
  int64_t hidden_channels() const { return static_cast<int64_t>(expand_ratio_ * static_cast<double>(in_channels_)); }
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(double, expand_ratio);
};

class GLUMBConvImpl : public torch::nn::Module {
 public:
  explicit GLUMBConvImpl(const GLUMBConvOptions& options);
  void reset();
  // [B, in, H, W] -> [B, out, H, W]
  torch::Tensor forward(const torch::Tensor& x);

  GLUMBConvOptions options;
  torch::nn::Conv2d conv_inverted{nullptr};
  torch::nn::Conv2d conv_depth{nullptr};
  torch::nn::Conv2d conv_point{nullptr};
};
TORCH_MODULE(GLUMBConv);

}  // namespace tune::nn
