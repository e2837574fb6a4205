// Layers that diffusers' PixArt-family transformers share (Latte-1's LatteTransformer3DModel, Sana's
// SanaTransformer2DModel): Attention with its projections under diffusers' names (softmax or Sana's ReLU linear
// core, optional RMS qk-norm across heads), AdaLayerNormSingle, PixArtAlphaTextProjection, and LoRA target
// selection by module-name suffix as PEFT's target_modules selects. Module names are diffusers', so
// named_parameters() equal the checkpoints' keys.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tune/nn/block_runner.h"
#include "tune/nn/lora_linear.h"
#include "tune/nn/rms_norm.h"
#include "tune/nn/timestep_embedder.h"

namespace tune::models {

// A parameter-free module to register children under, so that they are named "<holder>.<child>" (diffusers'
// nesting: to_out.0, net.0.proj, emb.timestep_embedder).
std::shared_ptr<torch::nn::Module> parameter_free_holder();

// The parameters of `module` that require a gradient (a block's, for the runner's recompute).
std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module);

// PixArt-style initial weights of every linear layer below `model` (torch::nn::Linear and nn::LoraLinear base weights):
// xavier-uniform, biases zero. LoRA adapters (names containing "lora_") keep PEFT's initialisation.
void init_linears_xavier(torch::nn::Module& model);

// The caption inputs of a text-conditioned transformer: text [batch, L >= 1, caption_channels] and text_mask
// [batch, L] or undefined; std::invalid_argument naming `model` and the shapes otherwise.
void check_caption_inputs(const char* model, int64_t batch, int64_t caption_channels, const torch::Tensor& text,
                          const torch::Tensor& text_mask);

// LoRA on a transformer's linear projections, chosen as PEFT's target_modules chooses them, by the module name's
// suffix ("to_q", "to_out.0", ...; the family lists the names it has). Rank 0: no adapter anywhere.
struct DiffusersLora {
  nn::LoraOptions options;
  std::vector<std::string> targets;

  bool adapts(const std::string& name) const;
  // The layer's options: biased or not, with an adapter when `name` is targeted.
  nn::LoraLinearOptions layer(int64_t in, int64_t out, bool bias, const std::string& name) const;
};

enum class AttentionCoreKind {
  softmax,      // softmax(q k^T / sqrt(head_dim) + mask) v through nn::run_attention_core
  relu_linear,  // Sana's linear attention (nn::relu_linear_attention, fp32, eps 1e-15 as diffusers'); no mask
};

struct DiffusersAttentionOptions {
  DiffusersAttentionOptions(int64_t query_dim, int64_t heads, int64_t head_dim)
      : query_dim_(query_dim), heads_(heads), head_dim_(head_dim), context_dim_(query_dim) {}
  int64_t inner_dim() const { return heads_ * head_dim_; }
  TORCH_ARG(int64_t, query_dim);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(int64_t, head_dim);
  TORCH_ARG(int64_t, context_dim);             // width of what keys and values are projected from
  TORCH_ARG(bool, qkv_bias) = true;            // to_out.0 always has a bias (diffusers' out_bias default)
  TORCH_ARG(bool, qk_norm) = false;            // qk_norm "rms_norm_across_heads": norm_q / norm_k over inner_dim
  TORCH_ARG(AttentionCoreKind, core) = AttentionCoreKind::softmax;
};

// diffusers' Attention: to_q [query_dim -> inner], to_k / to_v [context_dim -> inner], optional norm_q / norm_k
// (RMSNorm over all heads' channels, eps 1e-5, with weight), the core, to_out.0 [inner -> query_dim] (to_out.1 is a
// parameter-free dropout).
class DiffusersAttentionImpl : public torch::nn::Module {
 public:
  explicit DiffusersAttentionImpl(const DiffusersAttentionOptions& options, const DiffusersLora& lora = {});
  // x [N, T, query_dim] attends to context [N, S, context_dim] (x itself for self-attention); mask additive,
  // broadcastable to [N, heads, T, S], or undefined (the linear core takes none). Returns [N, T, query_dim].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const torch::Tensor& mask = {},
                        nn::BlockRunner* runner = nullptr);

  DiffusersAttentionOptions options;
  nn::LoraLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  nn::LoraLinear output{nullptr};  // registered as to_out.0
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};
};
TORCH_MODULE(DiffusersAttention);

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
