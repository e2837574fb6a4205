// The building blocks of AutoencoderKL, named as diffusers names them so that named_parameters() are the tensor
// names of diffusion_pytorch_model.safetensors: ResnetBlock2D (norm1, conv1, norm2, conv2, conv_shortcut),
// Downsample2D / Upsample2D (conv), the mid-block self-attention (group_norm, to_q, to_k, to_v, to_out.0),
// UNetMidBlock2D (resnets.{0,1}, attentions.0), DownEncoderBlock2D (resnets, downsamplers.0),
// UpDecoderBlock2D (resnets, upsamplers.0), and the Encoder and Decoder stacks.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>
#include <vector>

#include "tune/models/vae_config.h"

namespace tune::models::vae {

// GroupNorm eps of every norm in the VAE (diffusers hard-codes 1e-6 in Encoder, Decoder and their blocks).
inline constexpr double kNormEps = 1e-6;

// x + conv2(silu(norm2(conv1(silu(norm1(x)))))), the skip through a 1x1 conv when the channel count changes.
// No time embedding and no dropout (the VAE has neither at inference; dropout is 0 in every released config).
class ResnetBlock2DImpl : public torch::nn::Module {
 public:
  ResnetBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t groups);
  torch::Tensor forward(const torch::Tensor& input);

 private:
  torch::nn::GroupNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Conv2d conv_shortcut_{nullptr};  // null when in_channels == out_channels
};
TORCH_MODULE(ResnetBlock2D);

// Halves height and width: pad one zero column on the right and one row at the bottom, then a 3x3 conv with
// stride 2 and no padding (diffusers' Downsample2D with padding=0, as every VAE encoder uses it).
class Downsample2DImpl : public torch::nn::Module {
 public:
  explicit Downsample2DImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& input);

 private:
  torch::nn::Conv2d conv_{nullptr};
};
TORCH_MODULE(Downsample2D);

// Doubles height and width: nearest-neighbour 2x, then a 3x3 conv.
class Upsample2DImpl : public torch::nn::Module {
 public:
  explicit Upsample2DImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& input);

 private:
  torch::nn::Conv2d conv_{nullptr};
};
TORCH_MODULE(Upsample2D);

// Single-head self-attention over the H*W positions with a residual: group_norm, to_q/to_k/to_v, softmax over
// keys (computed in fp32, as diffusers' upcast_softmax), to_out.0. Older diffusers checkpoints name the
// projections query/key/value/proj_attn; the loader (vae.h) maps them.
class VaeAttentionImpl : public torch::nn::Module {
 public:
  VaeAttentionImpl(int64_t channels, int64_t groups);
  torch::Tensor forward(const torch::Tensor& input);

 private:
  torch::nn::GroupNorm group_norm_{nullptr};
  torch::nn::Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_{nullptr};  // to_out_ is "to_out.0"
};
TORCH_MODULE(VaeAttention);

// resnets.0 -> attentions.0 -> resnets.1 (UNetMidBlock2D with one layer and no time embedding).
class MidBlock2DImpl : public torch::nn::Module {
 public:
  MidBlock2DImpl(int64_t channels, int64_t groups, bool add_attention);
  torch::Tensor forward(const torch::Tensor& input);

 private:
  std::vector<ResnetBlock2D> resnets_;
  VaeAttention attention_{nullptr};  // null when add_attention is false
};
TORCH_MODULE(MidBlock2D);

// `num_layers` resnets (the first changes the channel count), then a Downsample2D unless it is the last block.
class DownEncoderBlock2DImpl : public torch::nn::Module {
 public:
  DownEncoderBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t num_layers, int64_t groups,
                         bool add_downsample);
  torch::Tensor forward(torch::Tensor input);

 private:
  std::vector<ResnetBlock2D> resnets_;
  Downsample2D downsampler_{nullptr};
};
TORCH_MODULE(DownEncoderBlock2D);

// `num_layers` resnets (the first changes the channel count), then an Upsample2D unless it is the last block.
class UpDecoderBlock2DImpl : public torch::nn::Module {
 public:
  UpDecoderBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t num_layers, int64_t groups,
                       bool add_upsample);
  torch::Tensor forward(torch::Tensor input);

 private:
  std::vector<ResnetBlock2D> resnets_;
  Upsample2D upsampler_{nullptr};
};
TORCH_MODULE(UpDecoderBlock2D);

// images [N, in_channels, H, W] -> [N, 2 * latent_channels, H / f, W / f] (mean and log-variance, before quant_conv).
class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const AutoencoderKLConfig& config);
  torch::Tensor forward(const torch::Tensor& images);

 private:
  torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  std::vector<DownEncoderBlock2D> down_blocks_;
  MidBlock2D mid_block_{nullptr};
  torch::nn::GroupNorm conv_norm_out_{nullptr};
};
TORCH_MODULE(Encoder);

// z [N, latent_channels, h, w] (after post_quant_conv) -> images [N, out_channels, h * f, w * f].
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const AutoencoderKLConfig& config);
  torch::Tensor forward(const torch::Tensor& latents);

 private:
  torch::nn::Conv2d conv_in_{nullptr}, conv_out_{nullptr};
  MidBlock2D mid_block_{nullptr};
  std::vector<UpDecoderBlock2D> up_blocks_;
  torch::nn::GroupNorm conv_norm_out_{nullptr};
};
TORCH_MODULE(Decoder);

}  // namespace tune::models::vae
