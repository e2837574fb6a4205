// The blocks of diffusers' AutoencoderDC (DC-AE, Sana's VAE), with diffusers' submodule names so that
// named_parameters() are the tensor names of its diffusion_pytorch_model.safetensors:
//   encoder.{conv_in, down_blocks.S.N.<block>, down_blocks.S.<last>.conv (downsample), conv_out}
//   decoder.{conv_in, up_blocks.S.0.conv (upsample), up_blocks.S.N.<block>, norm_out, conv_out}
//   <block> = ResBlock {conv1, conv2, norm} | EfficientViTBlock {attn.{to_q, to_k, to_v, to_qkv_multiscale.M.
//             {proj_in, proj_out}, to_out, norm_out}, conv_out.{conv_inverted, conv_depth, conv_point, norm}}
// All convolutions and norms act on [B, C, H, W]; RMSNorm is over channels, with a bias (eps 1e-5).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tune/models/dc_ae_config.h"
#include "tune/nn/glumb_conv.h"
#include "tune/nn/rms_norm.h"

namespace tune::models::dc_ae {

using Activation = std::function<torch::Tensor(const torch::Tensor&)>;
// "silu" | "swish" | "relu" | "gelu" | "mish", any case; throws std::invalid_argument otherwise.
Activation activation(const std::string& name);

// RMSNorm over the channel dimension of [B, C, H, W] plus a learned bias (diffusers' RMSNorm with bias=True, applied
// channels-last): tune's RMSNorm (fp32 statistics) with the bias added after the weight. Parameters: weight, bias.
class ChannelRMSNormImpl : public tune::nn::RMSNormImpl {
 public:
  explicit ChannelRMSNormImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor bias;
};
TORCH_MODULE(ChannelRMSNorm);

// x + norm(conv2(act(conv1(x)))): 3x3 convs, conv2 without bias.
class ResBlockImpl : public torch::nn::Module {
 public:
  ResBlockImpl(int64_t channels, const std::string& activation_name);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  ChannelRMSNorm norm_{nullptr};
  Activation activation_;
};
TORCH_MODULE(ResBlock);

// One extra scale of q|k|v: a depthwise k x k conv over all 3*inner channels, then a 1x1 conv grouped per
// (head, q/k/v) group of head_dim channels. No biases.
class MultiscaleProjectionImpl : public torch::nn::Module {
 public:
  MultiscaleProjectionImpl(int64_t inner_channels, int64_t heads, int64_t kernel_size);
  torch::Tensor forward(const torch::Tensor& qkv);

 private:
  torch::nn::Conv2d proj_in_{nullptr}, proj_out_{nullptr};
};
TORCH_MODULE(MultiscaleProjection);

// x + norm_out(to_out(linear attention over heads of [q|k|v] from the 1x1 projections and each extra scale)).
// heads = channels / head_dim (truncated). The concatenation [q, k, v] of every scale is cut into consecutive groups
// of 3*head_dim channels, each group one head's q|k|v: heads mix q, k and v channels exactly as diffusers' reshape
// does. Always the linear form (fp32 inside); diffusers switches to the algebraically equal quadratic form when
// H*W <= head_dim.
class MultiscaleLinearAttentionImpl : public torch::nn::Module {
 public:
  MultiscaleLinearAttentionImpl(int64_t channels, int64_t head_dim, const std::vector<int64_t>& kernel_sizes);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t head_dim_;
  torch::nn::Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_{nullptr};
  torch::nn::ModuleList to_qkv_multiscale_{nullptr};
  std::vector<MultiscaleProjection> scales_;
  ChannelRMSNorm norm_out_{nullptr};
};
TORCH_MODULE(MultiscaleLinearAttention);

// GLUMBConv (expand 4) with DC-AE's RMSNorm and residual around it: x + norm(glumb(x)). Parameters as diffusers':
// conv_inverted, conv_depth, conv_point (tune::nn::GLUMBConv's) and norm.
class NormedGLUMBConvImpl : public tune::nn::GLUMBConvImpl {
 public:
  explicit NormedGLUMBConvImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  ChannelRMSNorm norm_{nullptr};
};
TORCH_MODULE(NormedGLUMBConv);

// attn then conv_out, each with its own residual.
class EfficientViTBlockImpl : public torch::nn::Module {
 public:
  EfficientViTBlockImpl(int64_t channels, int64_t head_dim, const std::vector<int64_t>& kernel_sizes);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  MultiscaleLinearAttention attn_{nullptr};
  NormedGLUMBConv conv_out_{nullptr};
};
TORCH_MODULE(EfficientViTBlock);

// Halves H and W: conv (stride 2, or stride 1 to out/4 channels then pixel_unshuffle) plus the shortcut
// pixel_unshuffle(x) averaged over groups of 4*in/out channels.
class DownsampleImpl : public torch::nn::Module {
 public:
  DownsampleImpl(int64_t in_channels, int64_t out_channels, bool pixel_unshuffle);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  bool pixel_unshuffle_;
  int64_t group_size_;
  torch::nn::Conv2d conv_{nullptr};
};
TORCH_MODULE(Downsample);

// Doubles H and W: (nearest x2 then conv) or (conv to 4*out channels then pixel_shuffle), plus the shortcut
// pixel_shuffle(x with each channel repeated 4*out/in times).
class UpsampleImpl : public torch::nn::Module {
 public:
  UpsampleImpl(int64_t in_channels, int64_t out_channels, bool interpolate);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  bool interpolate_;
  int64_t repeats_;
  torch::nn::Conv2d conv_{nullptr};
};
TORCH_MODULE(Upsample);

// images [B, in_channels, H, W] -> latents [B, latent_channels, H/f, W/f].
class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const AutoencoderDCConfig& config);
  torch::Tensor forward(const torch::Tensor& images);

 private:
  bool out_shortcut_;
  int64_t out_group_size_;
  torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  torch::nn::ModuleList down_blocks_{nullptr};
  std::vector<torch::nn::Sequential> stages_;
};
TORCH_MODULE(Encoder);

// latents [B, latent_channels, h, w] -> images [B, in_channels, h*f, w*f]. Stages run deepest first.
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const AutoencoderDCConfig& config);
  torch::Tensor forward(const torch::Tensor& latents);

 private:
  bool in_shortcut_;
  int64_t in_repeats_;
  torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  torch::nn::ModuleList up_blocks_{nullptr};
  std::vector<torch::nn::Sequential> stages_;  // stages_[s] is up_blocks.s
  ChannelRMSNorm norm_out_{nullptr};
  Activation conv_activation_;
};
TORCH_MODULE(Decoder);

}  // namespace tune::models::dc_ae
