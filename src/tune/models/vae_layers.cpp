// AutoencoderKL's blocks: resnets, resamplers, the mid-block attention, and the encoder/decoder stacks.
#include "tune/models/vae_layers.h"

#include <fmt/format.h>

#include <cmath>

#include "tune/nn/linear.h"

namespace tune::models::vae {
namespace {

namespace F = torch::nn::functional;

torch::nn::GroupNorm make_norm(int64_t groups, int64_t channels) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(kNormEps));
}

torch::nn::Conv2d make_conv(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1) {
  // "same" padding for the stride-1 convs; the stride-2 conv of Downsample2D pads explicitly (asymmetrically).
  const int64_t padding = stride == 1 ? kernel / 2 : 0;
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, out_channels, kernel).stride(stride).padding(padding));
}

}  // namespace

ResnetBlock2DImpl::ResnetBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t groups) {
  norm1_ = register_module("norm1", make_norm(groups, in_channels));
  conv1_ = register_module("conv1", make_conv(in_channels, out_channels, 3));
  norm2_ = register_module("norm2", make_norm(groups, out_channels));
  conv2_ = register_module("conv2", make_conv(out_channels, out_channels, 3));
  if (in_channels != out_channels) conv_shortcut_ = register_module("conv_shortcut", make_conv(in_channels, out_channels, 1));
}

torch::Tensor ResnetBlock2DImpl::forward(const torch::Tensor& input) {
  torch::Tensor hidden = conv1_(torch::silu(norm1_(input)));
  hidden = conv2_(torch::silu(norm2_(hidden)));
  return (conv_shortcut_ ? conv_shortcut_(input) : input) + hidden;
}

Downsample2DImpl::Downsample2DImpl(int64_t channels) {
  conv_ = register_module("conv", make_conv(channels, channels, 3, /*stride=*/2));
}

torch::Tensor Downsample2DImpl::forward(const torch::Tensor& input) {
  // (left, right, top, bottom): the extra zero goes right and bottom only, as the original LDM encoder did.
  return conv_(F::pad(input, F::PadFuncOptions({0, 1, 0, 1})));
}

Upsample2DImpl::Upsample2DImpl(int64_t channels) { conv_ = register_module("conv", make_conv(channels, channels, 3)); }

torch::Tensor Upsample2DImpl::forward(const torch::Tensor& input) {
  const auto upsampled = F::interpolate(
      input, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kNearest));
  return conv_(upsampled);
}

VaeAttentionImpl::VaeAttentionImpl(int64_t channels, int64_t groups) {
  group_norm_ = register_module("group_norm", make_norm(groups, channels));
  to_q_ = register_module("to_q", torch::nn::Linear(channels, channels));
  to_k_ = register_module("to_k", torch::nn::Linear(channels, channels));
  to_v_ = register_module("to_v", torch::nn::Linear(channels, channels));
  // diffusers' to_out is [Linear, Dropout]; only the Linear holds weights, so a one-entry list gives "to_out.0".
  torch::nn::ModuleList to_out;
  to_out_ = torch::nn::Linear(channels, channels);
  to_out->push_back(to_out_);
  register_module("to_out", to_out);
}

torch::Tensor VaeAttentionImpl::forward(const torch::Tensor& input) {
  const int64_t batch = input.size(0), channels = input.size(1), height = input.size(2), width = input.size(3);
  // [N, C, H, W] -> [N, H*W, C]: positions are the tokens, channels the (single) head's width.
  const auto tokens = group_norm_(input).reshape({batch, channels, height * width}).transpose(1, 2);
  const auto query = nn::linear(to_q_, tokens);
  const auto key = nn::linear(to_k_, tokens);
  const auto value = nn::linear(to_v_, tokens);
  const auto scores = torch::matmul(query, key.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(channels)));
  // Softmax in fp32 whatever the compute dtype (diffusers' upcast_softmax): at 64x64 latents a row has 4096 terms.
  const auto weights = torch::softmax(scores.to(torch::kFloat32), -1).to(value.scalar_type());
  const auto attended = nn::linear(to_out_, torch::matmul(weights, value));
  return input + attended.transpose(1, 2).reshape({batch, channels, height, width});
}

MidBlock2DImpl::MidBlock2DImpl(int64_t channels, int64_t groups, bool add_attention) {
  torch::nn::ModuleList resnets;
  for (int index = 0; index < 2; ++index) {
    resnets_.push_back(ResnetBlock2D(channels, channels, groups));
    resnets->push_back(resnets_.back());
  }
  register_module("resnets", resnets);
  if (add_attention) {
    torch::nn::ModuleList attentions;
    attention_ = VaeAttention(channels, groups);
    attentions->push_back(attention_);
    register_module("attentions", attentions);
  }
}

torch::Tensor MidBlock2DImpl::forward(const torch::Tensor& input) {
  torch::Tensor hidden = resnets_[0](input);
  if (attention_) hidden = attention_(hidden);
  return resnets_[1](hidden);
}

DownEncoderBlock2DImpl::DownEncoderBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t num_layers,
                                               int64_t groups, bool add_downsample) {
  torch::nn::ModuleList resnets;
  for (int64_t index = 0; index < num_layers; ++index) {
    resnets_.push_back(ResnetBlock2D(index == 0 ? in_channels : out_channels, out_channels, groups));
    resnets->push_back(resnets_.back());
  }
  register_module("resnets", resnets);
  if (add_downsample) {
    torch::nn::ModuleList downsamplers;
    downsampler_ = Downsample2D(out_channels);
    downsamplers->push_back(downsampler_);
    register_module("downsamplers", downsamplers);
  }
}

torch::Tensor DownEncoderBlock2DImpl::forward(torch::Tensor input) {
  for (auto& resnet : resnets_) input = resnet(input);
  return downsampler_ ? downsampler_(input) : input;
}

UpDecoderBlock2DImpl::UpDecoderBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t num_layers,
                                           int64_t groups, bool add_upsample) {
  torch::nn::ModuleList resnets;
  for (int64_t index = 0; index < num_layers; ++index) {
    resnets_.push_back(ResnetBlock2D(index == 0 ? in_channels : out_channels, out_channels, groups));
    resnets->push_back(resnets_.back());
  }
  register_module("resnets", resnets);
  if (add_upsample) {
    torch::nn::ModuleList upsamplers;
    upsampler_ = Upsample2D(out_channels);
    upsamplers->push_back(upsampler_);
    register_module("upsamplers", upsamplers);
  }
}

torch::Tensor UpDecoderBlock2DImpl::forward(torch::Tensor input) {
  for (auto& resnet : resnets_) input = resnet(input);
  return upsampler_ ? upsampler_(input) : input;
}

EncoderImpl::EncoderImpl(const AutoencoderKLConfig& config) {
  const auto& channels = config.block_out_channels;
  const int64_t groups = config.norm_num_groups;
  conv_in_ = register_module("conv_in", make_conv(config.in_channels, channels.front(), 3));
  torch::nn::ModuleList down_blocks;
  int64_t previous = channels.front();
  for (size_t index = 0; index < channels.size(); ++index) {
    const bool last = index + 1 == channels.size();
    down_blocks_.push_back(DownEncoderBlock2D(previous, channels[index], config.layers_per_block, groups, !last));
    down_blocks->push_back(down_blocks_.back());
    previous = channels[index];
  }
  register_module("down_blocks", down_blocks);
  mid_block_ = register_module("mid_block", MidBlock2D(channels.back(), groups, config.mid_block_add_attention));
  conv_norm_out_ = register_module("conv_norm_out", make_norm(groups, channels.back()));
  // Twice the latent channels: the mean and the log-variance of the posterior ("double_z").
  conv_out_ = register_module("conv_out", make_conv(channels.back(), 2 * config.latent_channels, 3));
}

torch::Tensor EncoderImpl::forward(const torch::Tensor& images) {
  torch::Tensor hidden = conv_in_(images);
  for (auto& block : down_blocks_) hidden = block(hidden);
  hidden = mid_block_(hidden);
  return conv_out_(torch::silu(conv_norm_out_(hidden)));
}

DecoderImpl::DecoderImpl(const AutoencoderKLConfig& config) {
  const auto& channels = config.block_out_channels;
  const int64_t groups = config.norm_num_groups;
  conv_in_ = register_module("conv_in", make_conv(config.latent_channels, channels.back(), 3));
  mid_block_ = register_module("mid_block", MidBlock2D(channels.back(), groups, config.mid_block_add_attention));
  torch::nn::ModuleList up_blocks;
  int64_t previous = channels.back();
  for (size_t index = 0; index < channels.size(); ++index) {
    const int64_t out = channels[channels.size() - 1 - index];  // widest first
    const bool last = index + 1 == channels.size();
    // One resnet more than the encoder's blocks, as in diffusers' Decoder.
    up_blocks_.push_back(UpDecoderBlock2D(previous, out, config.layers_per_block + 1, groups, !last));
    up_blocks->push_back(up_blocks_.back());
    previous = out;
  }
  register_module("up_blocks", up_blocks);
  conv_norm_out_ = register_module("conv_norm_out", make_norm(groups, channels.front()));
  conv_out_ = register_module("conv_out", make_conv(channels.front(), config.out_channels, 3));
}

torch::Tensor DecoderImpl::forward(const torch::Tensor& latents) {
  torch::Tensor hidden = mid_block_(conv_in_(latents));
  for (auto& block : up_blocks_) hidden = block(hidden);
  return conv_out_(torch::silu(conv_norm_out_(hidden)));
}

}  // namespace tune::models::vae
