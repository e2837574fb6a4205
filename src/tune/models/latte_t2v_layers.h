// The building blocks of the text-to-video Latte (Latte-1) as diffusers builds them: Attention, FeedForward
// ("gelu-approximate"), BasicTransformerBlock with norm_type "ada_norm_single" (PixArt), AdaLayerNormSingle and
// PixArtAlphaTextProjection. Module names are diffusers', so named_parameters() equal the checkpoint's keys.
// AdaLayerNormSingle and CaptionProjection are PixArt's and Sana's too (diffusers reuses them there).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <utility>
#include <vector>

#include "tune/models/latte_t2v_config.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/lora_linear.h"
#include "tune/nn/timestep_embedder.h"

namespace tune::models {

// LoRA on the blocks' projections, chosen as PEFT's target_modules chooses them, by the module name's suffix:
// "to_q", "to_k", "to_v", "to_out.0" (in attn1 and attn2 alike), "ff.net.0.proj", "ff.net.2". Rank 0: no adapter.
struct LatteT2VLora {
  nn::LoraOptions options;
  std::vector<std::string> targets;

  static const std::vector<std::string>& known_targets();
  bool adapts(const std::string& name) const;  // `name` one of known_targets()
  // The layer's options: biased or not, with an adapter when `name` is targeted.
  nn::LoraLinearOptions layer(int64_t in, int64_t out, bool bias, const std::string& name) const;
};

// diffusers' Attention with its default processor: to_q / to_k / to_v [D -> D] (biased when attention_bias),
// to_out.0 [D -> D] with bias (to_out.1 is a parameter-free dropout), softmax(q k^T / sqrt(head_dim)) v through
// nn::run_attention_core (recomputed in backward under selective checkpointing).
class LatteT2VAttentionImpl : public torch::nn::Module {
 public:
  LatteT2VAttentionImpl(int64_t dim, int64_t num_heads, bool qkv_bias, const LatteT2VLora& lora = {});
  // x [N, T, D] attends to context [N, S, D] (x itself for self-attention); mask additive, broadcastable to
  // [N, heads, T, S], or undefined. Returns [N, T, D].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const torch::Tensor& mask = {},
                        nn::BlockRunner* runner = nullptr);

  int64_t num_heads, head_dim;
  nn::LoraLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  nn::LoraLinear output{nullptr};  // registered as to_out.0
};
TORCH_MODULE(LatteT2VAttention);

// diffusers' FeedForward with activation_fn "gelu-approximate": net.0.proj [D -> 4D], tanh GELU (an activation
// region of the runner), net.2 [4D -> D] (net.1 is a parameter-free dropout).
class LatteT2VFeedForwardImpl : public torch::nn::Module {
 public:
  explicit LatteT2VFeedForwardImpl(int64_t dim, const LatteT2VLora& lora = {});
  torch::Tensor forward(const torch::Tensor& x, nn::BlockRunner* runner = nullptr);

  nn::LoraLinear up{nullptr};    // net.0.proj
  nn::LoraLinear down{nullptr};  // net.2
};
TORCH_MODULE(LatteT2VFeedForward);

// diffusers' BasicTransformerBlock with norm_type "ada_norm_single" (PixArt's block), as Latte-1's spatial blocks
// (with cross-attention attn2) and temporal blocks (without). With (shift, scale, gate) x 2 =
// scale_shift_table [6, D] + the sample's timestep6 [6, D]:
//   x += gate_msa * attn1(norm1(x) * (1 + scale_msa) + shift_msa)
//   x += attn2(x, caption, caption_mask)          spatial blocks only: no norm, no gate (PixArt)
//   x += gate_mlp * ff(norm2(x) * (1 + scale_mlp) + shift_mlp)
// norm1 / norm2 are LayerNorms without affine (eps norm_eps), run as norm regions of the runner.
class LatteT2VBlockImpl : public torch::nn::Module {
 public:
  LatteT2VBlockImpl(const LatteT2VConfig& config, bool cross_attention, const LatteT2VLora& lora = {});
  // x [B * R, T, D]: R rows of T tokens per sample, each row attending within itself (a spatial block: the frames
  // of a sample, T patches each; a temporal block: the patch positions, T frames each). timestep6 [B, 6, D].
  // caption [B, L, D] and caption_mask (additive, [B, 1, 1, L], or undefined): the cross-attention's context, its
  // keys and values projected once per sample for all of the sample's rows (diffusers projects them per row from
  // a repeated caption: the same values). Returns [B * R, T, D].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& timestep6, const torch::Tensor& caption = {},
                        const torch::Tensor& caption_mask = {}, nn::BlockRunner* runner = nullptr);

  bool has_cross_attention() const { return !attn2.is_empty(); }

  double norm_eps;
  torch::Tensor scale_shift_table;  // [6, D]: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  LatteT2VAttention attn1{nullptr};
  LatteT2VAttention attn2{nullptr};  // null in temporal blocks
  LatteT2VFeedForward ff{nullptr};
};
TORCH_MODULE(LatteT2VBlock);

// diffusers' AdaLayerNormSingle without additional conditions: embedded_timestep = emb.timestep_embedder(t)
// (the [cos, sin] sinusoid of width 256 -> Linear -> SiLU -> Linear, nn::TimestepEmbedder with diffusers' names)
// and timestep6 = linear(silu(embedded_timestep)) [6 * D], the blocks' shared modulation.
class AdaLayerNormSingleImpl : public torch::nn::Module {
 public:
  explicit AdaLayerNormSingleImpl(int64_t dim);
  // t [B] (integer or fractional) -> {timestep6 [B, 6 * D], embedded_timestep [B, D]}.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& t);

  nn::TimestepEmbedder timestep_embedder{nullptr};  // registered as emb.timestep_embedder
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(AdaLayerNormSingle);

// diffusers' PixArtAlphaTextProjection: linear_1 [caption_channels -> D], tanh GELU, linear_2 [D -> D].
class CaptionProjectionImpl : public torch::nn::Module {
 public:
  CaptionProjectionImpl(int64_t caption_channels, int64_t dim);
  torch::Tensor forward(const torch::Tensor& caption);  // [B, L, caption_channels] -> [B, L, D]

  torch::nn::Linear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(CaptionProjection);

}  // namespace tune::models
