// The building blocks of the text-to-video Latte (Latte-1) as diffusers builds them: FeedForward ("gelu-approximate")
// and BasicTransformerBlock with norm_type "ada_norm_single" (PixArt), on the layers diffusers' PixArt family shares
// (diffusers_layers.h). Module names are diffusers', so named_parameters() equal the checkpoint's keys.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "tune/models/diffusers_layers.h"
#include "tune/models/latte_t2v_config.h"
#include "tune/nn/block_runner.h"

namespace tune::models {

// LoRA on the blocks' projections: "to_q", "to_k", "to_v", "to_out.0" (in attn1 and attn2 alike), "ff.net.0.proj",
// "ff.net.2" (latte_t2v_lora_targets()).
using LatteT2VLora = DiffusersLora;
const std::vector<std::string>& latte_t2v_lora_targets();

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
  // image_rows n > 0 (a spatial block of image-video joint training, the official use_image_num): each sample's
  // last n rows are images, each with its own caption; caption holds 1 + n captions of L rows ([B, (1 + n) L, D]:
  // the video's, then each image's) and caption_mask is [B, 1 + n, L] (additive) or undefined. The video rows
  // attend to the first caption, image j's row to caption 1 + j.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& timestep6, const torch::Tensor& caption = {},
                        const torch::Tensor& caption_mask = {}, nn::BlockRunner* runner = nullptr,
                        int64_t image_rows = 0);

  bool has_cross_attention() const { return !attn2.is_empty(); }

 private:
  // attn2 over hidden [B, R * T, D] whose last image_rows rows per sample are images (see forward).
  torch::Tensor cross_attend_with_images(const torch::Tensor& hidden, int64_t row_length, const torch::Tensor& caption,
                                         const torch::Tensor& caption_mask, nn::BlockRunner* runner,
                                         int64_t image_rows);

 public:

  double norm_eps;
  torch::Tensor scale_shift_table;  // [6, D]: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  DiffusersAttention attn1{nullptr};
  DiffusersAttention attn2{nullptr};  // null in temporal blocks
  LatteT2VFeedForward ff{nullptr};
};
TORCH_MODULE(LatteT2VBlock);

}  // namespace tune::models
