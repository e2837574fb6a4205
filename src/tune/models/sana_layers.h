// Sana's transformer block as diffusers' SanaTransformerBlock computes it, on the layers diffusers' PixArt family
// shares (diffusers_layers.h) and nn::GLUMBConv. Module names are diffusers', so named_parameters() equal the
// checkpoint's keys: scale_shift_table, attn1.{to_q,to_k,to_v,to_out.0,norm_q,norm_k}, attn2.{...},
// ff.{conv_inverted,conv_depth,conv_point}.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "tune/models/diffusers_layers.h"
#include "tune/models/sana_config.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/glumb_conv.h"

namespace tune::models {

// LoRA on the blocks' attention projections, by PEFT's suffix rule: "to_q", "to_k", "to_v", "to_out.0" (in attn1 and
// attn2 alike; diffusers' train_dreambooth_lora_sana.py targets to_q, to_k, to_v). The GLUMBConv convolutions take
// no adapter.
using SanaLora = DiffusersLora;
const std::vector<std::string>& sana_lora_targets();

// With (shift, scale, gate) x 2 = scale_shift_table [6, D] + the sample's timestep6 [6, D]:
//   x += gate_msa * attn1(norm1(x) * (1 + scale_msa) + shift_msa)   ReLU linear self-attention (fp32 inside)
//   x += attn2(x, caption, caption_mask)                            softmax cross-attention: no norm, no gate
//   x += gate_mlp * ff(norm2(x) * (1 + scale_mlp) + shift_mlp)      GLUMBConv on the [D, H, W] token grid
// norm1 / norm2 are LayerNorms without affine (eps norm_eps), run as norm regions of the runner.
class SanaBlockImpl : public torch::nn::Module {
 public:
  SanaBlockImpl(const SanaConfig& config, const SanaLora& lora = {});
  // x [B, H * W, D] tokens of an H x W grid (row-major); timestep6 [B, 6, D]; caption [B, L, D];
  // caption_mask additive, [B, 1, 1, L], or undefined. Returns [B, H * W, D].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& timestep6, const torch::Tensor& caption,
                        const torch::Tensor& caption_mask, int64_t grid_height, int64_t grid_width,
                        nn::BlockRunner* runner = nullptr);

  double norm_eps;
  torch::Tensor scale_shift_table;  // [6, D]: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  DiffusersAttention attn1{nullptr};
  DiffusersAttention attn2{nullptr};
  nn::GLUMBConv ff{nullptr};
};
TORCH_MODULE(SanaBlock);

}  // namespace tune::models
