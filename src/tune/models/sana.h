// NVlabs' Sana transformer as diffusers' SanaTransformer2DModel computes it: 1x1 patch tokens of the DC-AE latent
// (a 2-D sin-cos table only when the config has interpolation_scale), adaLN-single on the timestep, the caption
// projected then RMS-normed (caption_norm), num_layers Sana blocks (linear self-attention, cross-attention to the
// caption, GLUMBConv), the modulated output norm, a linear and unpatchify. Parameter names are diffusers' state-dict
// keys (transformer/diffusion_pytorch_model.safetensors loads as is): patch_embed.proj.*, time_embed.{emb.
// timestep_embedder.linear_{1,2}, linear}.*, caption_projection.linear_{1,2}.*, caption_norm.weight,
// transformer_blocks.N.*, scale_shift_table, proj_out.*.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <utility>
#include <vector>

#include "tune/models/diffusers_layers.h"
#include "tune/models/sana_config.h"
#include "tune/models/sana_layers.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/patch_embed.h"
#include "tune/nn/rms_norm.h"

namespace tune::models {

class SanaImpl : public torch::nn::Module {
 public:
  // Validates the config (InputError) and initialises with reset_parameters(). lora: adapters on the projections
  // it targets (lora_A / lora_B under PEFT's names); the base weights stay parameters (the caller freezes them).
  explicit SanaImpl(const SanaConfig& config, const SanaLora& lora = {});
  // The official initialisation in outline (the model is mostly loaded from files): xavier-uniform linear and
  // patch weights with zero biases, the timestep MLP and caption projection normal(0, 0.02), the scale-shift tables
  // randn / sqrt(D) (diffusers'), caption_norm's weight 0.01 (the official y_norm_scale_factor), the
  // cross-attention output projections and proj_out zero (a fresh model ignores the caption and predicts 0).
  void reset_parameters();

  // x [B, in_channels, H, W] latents (H and W multiples of patch_size); t [B] timesteps as the model takes them
  // (the pipeline's, already multiplied by timestep_scale; integer or fractional); text [B, L, caption_channels];
  // text_mask [B, L] (bool or integer, 1 = attend; undefined = every token) becomes the additive bias
  // (1 - mask) * -10000 on the cross-attention scores, as diffusers builds it. Returns [B, out_channels, H, W], at
  // least float32 (an autocast bf16 result is cast up).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                        const torch::Tensor& text_mask = {});

  // The blocks for the memory machinery and distributed wrapping, in execution order. The stack runs as one
  // run_stack() over the state [B, N + 6 + L, D]: the N image tokens, then the sample's timestep6 (6 rows) and its
  // projected, normed caption (L rows). Carried in the state, those are an input of every block, so a recomputing
  // runner returns their gradients (time_embed, caption_projection and caption_norm train) and full_shard's input
  // hook covers them; each block passes them through unchanged. The text mask takes no gradient and is captured.
  int64_t num_blocks() const { return config_.num_layers; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() const;
  // The block type name distributed.shard_blocks matches: diffusers' class name. The official code's name for the
  // same block, SanaMSBlock, is accepted as an alias by the recipe.
  static const char* block_type() { return "SanaTransformerBlock"; }
  void set_block_runner(std::shared_ptr<nn::BlockRunner> runner) { runner_ = std::move(runner); }

  const SanaConfig& config() const { return config_; }
  const SanaLora& lora() const { return lora_; }
  bool has_lora() const { return lora_.options.rank > 0; }

  // Submodules under diffusers' names.
  nn::PatchEmbed patch_embed{nullptr};
  AdaLayerNormSingle time_embed{nullptr};
  CaptionProjection caption_projection{nullptr};
  nn::RMSNorm caption_norm{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};  // SanaBlock
  torch::Tensor scale_shift_table;                    // [2, D]: the output norm's shift, scale (+ embedded t)
  torch::nn::Linear proj_out{nullptr};                // [D -> p * p * out_channels]

 private:
  SanaConfig config_;
  SanaLora lora_;
  std::shared_ptr<nn::BlockRunner> runner_;
};
TORCH_MODULE(Sana);

}  // namespace tune::models
