// DC-AE's blocks: residual conv blocks, EfficientViT blocks (multi-scale ReLU linear attention + GLUMBConv), the
// shortcut down/upsamplers, and the encoder and decoder built from them.
#include "tune/models/dc_ae_layers.h"

#include <fmt/format.h>
#include <torch/nn/functional/pixelshuffle.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <utility>

#include "tune/nn/linear_attention.h"

namespace tune::models::dc_ae {
namespace {

// diffusers' SanaMultiscaleLinearAttention default: the normaliser's guard (fp32 arithmetic).
constexpr double kAttentionEps = 1e-15;
constexpr double kNormEps = 1e-5;

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, bool bias = true, int64_t stride = 1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(bias));
}

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// Linear layers act on channels-last features.
torch::Tensor channels_last_linear(torch::nn::Linear& layer, const torch::Tensor& x) {
  return layer->forward(x.movedim(1, -1)).movedim(-1, 1);
}

// One stage's blocks of one type, named 0..n-1 inside `stage`.
void add_blocks(torch::nn::Sequential& stage, const std::string& type, int64_t count, int64_t channels,
                int64_t head_dim, const std::vector<int64_t>& kernel_sizes, const std::string& activation_name) {
  for (int64_t index = 0; index < count; ++index) {
    if (type == "ResBlock") {
      stage->push_back(ResBlock(channels, activation_name));
    } else if (type == "EfficientViTBlock") {
      stage->push_back(EfficientViTBlock(channels, head_dim, kernel_sizes));
    } else {
      throw std::invalid_argument(fmt::format("AutoencoderDC: unknown block type '{}'", type));
    }
  }
}

}  // namespace

Activation activation(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "silu" || lower == "swish") return [](const torch::Tensor& x) { return torch::silu(x); };
  if (lower == "relu") return [](const torch::Tensor& x) { return torch::relu(x); };
  if (lower == "gelu") return [](const torch::Tensor& x) { return torch::gelu(x); };
  if (lower == "mish") return [](const torch::Tensor& x) { return torch::mish(x); };
  throw std::invalid_argument(fmt::format("AutoencoderDC: unknown activation '{}'", name));
}

ChannelRMSNormImpl::ChannelRMSNormImpl(int64_t channels)
    : tune::nn::RMSNormImpl(tune::nn::RMSNormOptions(channels).eps(kNormEps)) {
  bias = register_parameter("bias", torch::zeros({channels}));
}

torch::Tensor ChannelRMSNormImpl::forward(const torch::Tensor& x) {
  return (tune::nn::RMSNormImpl::forward(x.movedim(1, -1)) + bias).movedim(-1, 1);
}

ResBlockImpl::ResBlockImpl(int64_t channels, const std::string& activation_name)
    : activation_(activation(activation_name)) {
  conv1_ = register_module("conv1", conv3x3(channels, channels));
  conv2_ = register_module("conv2", conv3x3(channels, channels, /*bias=*/false));
  norm_ = register_module("norm", ChannelRMSNorm(channels));
}

torch::Tensor ResBlockImpl::forward(const torch::Tensor& x) {
  return x + norm_(conv2_(activation_(conv1_(x))));
}

MultiscaleProjectionImpl::MultiscaleProjectionImpl(int64_t inner_channels, int64_t heads, int64_t kernel_size) {
  const int64_t channels = 3 * inner_channels;
  proj_in_ = register_module("proj_in", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, channels, kernel_size)
                                                              .padding(kernel_size / 2)
                                                              .groups(channels)
                                                              .bias(false)));
  proj_out_ = register_module(
      "proj_out", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, channels, 1).groups(3 * heads).bias(false)));
}

torch::Tensor MultiscaleProjectionImpl::forward(const torch::Tensor& qkv) { return proj_out_(proj_in_(qkv)); }

MultiscaleLinearAttentionImpl::MultiscaleLinearAttentionImpl(int64_t channels, int64_t head_dim,
                                                             const std::vector<int64_t>& kernel_sizes)
    : head_dim_(head_dim) {
  const int64_t heads = channels / head_dim;
  const int64_t inner = heads * head_dim;
  to_q_ = register_module("to_q", linear(channels, inner));
  to_k_ = register_module("to_k", linear(channels, inner));
  to_v_ = register_module("to_v", linear(channels, inner));
  to_qkv_multiscale_ = register_module("to_qkv_multiscale", torch::nn::ModuleList());
  for (int64_t kernel : kernel_sizes) {
    scales_.push_back(MultiscaleProjection(inner, heads, kernel));
    to_qkv_multiscale_->push_back(scales_.back());
  }
  to_out_ = register_module("to_out", linear(inner * static_cast<int64_t>(1 + kernel_sizes.size()), channels));
  norm_out_ = register_module("norm_out", ChannelRMSNorm(channels));
}

torch::Tensor MultiscaleLinearAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), height = x.size(2), width = x.size(3);
  const auto x_last = x.movedim(1, -1);
  const auto qkv = torch::cat({to_q_(x_last), to_k_(x_last), to_v_(x_last)}, -1).movedim(-1, 1);  // [B, 3I, H, W]
  std::vector<torch::Tensor> scales{qkv};
  for (auto& scale : scales_) scales.push_back(scale(qkv));
  // [B, groups, 3*head_dim, N]: each run of 3*head_dim consecutive channels is one head's q|k|v.
  const auto grouped = torch::cat(scales, 1).reshape({batch, -1, 3 * head_dim_, height * width});
  const auto parts = grouped.chunk(3, 2);  // each [B, groups, head_dim, N]
  const auto query = torch::relu(parts[0]).transpose(-1, -2);
  const auto key = torch::relu(parts[1]).transpose(-1, -2);
  const auto value = parts[2].transpose(-1, -2);
  // [B, groups, N, head_dim] -> [B, groups * head_dim, H, W] with channels ordered (group, dim) as diffusers'.
  const auto attended = tune::nn::relu_linear_attention(query, key, value, kAttentionEps)
                            .transpose(-1, -2)
                            .reshape({batch, -1, height, width});
  return x + norm_out_(channels_last_linear(to_out_, attended));
}

NormedGLUMBConvImpl::NormedGLUMBConvImpl(int64_t channels)
    : tune::nn::GLUMBConvImpl(tune::nn::GLUMBConvOptions(channels, channels, /*expand_ratio=*/4.0)) {
  norm_ = register_module("norm", ChannelRMSNorm(channels));
}

torch::Tensor NormedGLUMBConvImpl::forward(const torch::Tensor& x) {
  return x + norm_(tune::nn::GLUMBConvImpl::forward(x));
}

EfficientViTBlockImpl::EfficientViTBlockImpl(int64_t channels, int64_t head_dim,
                                             const std::vector<int64_t>& kernel_sizes) {
  attn_ = register_module("attn", MultiscaleLinearAttention(channels, head_dim, kernel_sizes));
  conv_out_ = register_module("conv_out", NormedGLUMBConv(channels));
}

torch::Tensor EfficientViTBlockImpl::forward(const torch::Tensor& x) { return conv_out_(attn_(x)); }

DownsampleImpl::DownsampleImpl(int64_t in_channels, int64_t out_channels, bool pixel_unshuffle)
    : pixel_unshuffle_(pixel_unshuffle), group_size_(4 * in_channels / out_channels) {
  conv_ = register_module("conv", pixel_unshuffle ? conv3x3(in_channels, out_channels / 4)
                                                  : conv3x3(in_channels, out_channels, true, /*stride=*/2));
}

torch::Tensor DownsampleImpl::forward(const torch::Tensor& x) {
  auto out = conv_(x);
  if (pixel_unshuffle_) out = torch::pixel_unshuffle(out, 2);
  // Shortcut: the 4*in space-to-depth channels averaged in consecutive groups down to out channels.
  const auto shortcut = torch::pixel_unshuffle(x, 2);
  return out + shortcut.reshape({shortcut.size(0), -1, group_size_, shortcut.size(2), shortcut.size(3)}).mean(2);
}

UpsampleImpl::UpsampleImpl(int64_t in_channels, int64_t out_channels, bool interpolate)
    : interpolate_(interpolate), repeats_(4 * out_channels / in_channels) {
  conv_ = register_module("conv", conv3x3(in_channels, interpolate ? out_channels : 4 * out_channels));
}

torch::Tensor UpsampleImpl::forward(const torch::Tensor& x) {
  torch::Tensor out;
  if (interpolate_) {
    namespace F = torch::nn::functional;
    out = conv_(F::interpolate(x, F::InterpolateFuncOptions()
                                      .scale_factor(std::vector<double>{2.0, 2.0})
                                      .mode(torch::kNearest)));
  } else {
    out = torch::pixel_shuffle(conv_(x), 2);
  }
  // Shortcut: every channel repeated in place, then depth-to-space.
  return out + torch::pixel_shuffle(x.repeat_interleave(repeats_, 1), 2);
}

EncoderImpl::EncoderImpl(const AutoencoderDCConfig& config)
    : out_shortcut_(config.encoder_out_shortcut),
      out_group_size_(config.encoder_block_out_channels.back() / config.latent_channels) {
  const auto& channels = config.encoder_block_out_channels;
  const size_t stages = channels.size();
  conv_in_ = register_module("conv_in", conv3x3(config.in_channels, channels[0]));
  down_blocks_ = register_module("down_blocks", torch::nn::ModuleList());
  for (size_t s = 0; s < stages; ++s) {
    torch::nn::Sequential stage;
    add_blocks(stage, config.encoder_block_types[s], config.encoder_layers_per_block[s], channels[s],
               config.attention_head_dim, config.encoder_qkv_multiscales[s], "silu");
    if (s + 1 < stages) {
      stage->push_back(Downsample(channels[s], channels[s + 1], config.downsample_block_type == "pixel_unshuffle"));
    }
    down_blocks_->push_back(stage);
    stages_.push_back(stage);
  }
  conv_out_ = register_module("conv_out", conv3x3(channels.back(), config.latent_channels));
}

torch::Tensor EncoderImpl::forward(const torch::Tensor& images) {
  auto h = conv_in_(images);
  for (auto& stage : stages_) h = stage->forward(h);
  if (!out_shortcut_) return conv_out_(h);
  // Shortcut: the channels averaged in consecutive groups down to latent_channels.
  const auto shortcut = h.reshape({h.size(0), -1, out_group_size_, h.size(2), h.size(3)}).mean(2);
  return conv_out_(h) + shortcut;
}

DecoderImpl::DecoderImpl(const AutoencoderDCConfig& config)
    : in_shortcut_(config.decoder_in_shortcut),
      in_repeats_(config.decoder_block_out_channels.back() / config.latent_channels),
      conv_activation_(activation(config.decoder_conv_act_fn)) {
  const auto& channels = config.decoder_block_out_channels;
  const size_t stages = channels.size();
  conv_in_ = register_module("conv_in", conv3x3(config.latent_channels, channels.back()));
  up_blocks_ = register_module("up_blocks", torch::nn::ModuleList());
  for (size_t s = 0; s < stages; ++s) {
    torch::nn::Sequential stage;
    if (s + 1 < stages) {
      stage->push_back(Upsample(channels[s + 1], channels[s], config.upsample_block_type == "interpolate"));
    }
    add_blocks(stage, config.decoder_block_types[s], config.decoder_layers_per_block[s], channels[s],
               config.attention_head_dim, config.decoder_qkv_multiscales[s], config.decoder_act_fns[s]);
    up_blocks_->push_back(stage);
    stages_.push_back(stage);
  }
  norm_out_ = register_module("norm_out", ChannelRMSNorm(channels[0]));
  conv_out_ = register_module("conv_out", conv3x3(channels[0], config.in_channels));
}

torch::Tensor DecoderImpl::forward(const torch::Tensor& latents) {
  auto h = conv_in_(latents);
  if (in_shortcut_) h = h + latents.repeat_interleave(in_repeats_, 1);
  for (auto stage = stages_.rbegin(); stage != stages_.rend(); ++stage) h = (*stage)->forward(h);
  return conv_out_(conv_activation_(norm_out_(h)));
}

}  // namespace tune::models::dc_ae
