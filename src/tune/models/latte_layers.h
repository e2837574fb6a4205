// The building blocks of Latte (Vchitect/Latte, models/latte.py): timm-style attention and MLP, the adaLN-Zero
// transformer block (used both as spatial and as temporal block), the final layer and the class-label embedder.
// Module names are the official ones, so named_parameters() equal the official checkpoint keys.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "tune/models/latte_config.h"
#include "tune/nn/block_runner.h"

namespace tune::models {

// timm Attention with qkv_bias: qkv [D -> 3D], heads, softmax(q k^T / sqrt(head_dim)) v in fp32, proj [D -> D].
// The scores-softmax-values core is nn::run_attention_core: its probabilities recomputed in backward when `runner`
// recomputes the attention core (selective checkpointing), else plain.
class LatteAttentionImpl : public torch::nn::Module {
 public:
  LatteAttentionImpl(int64_t hidden_size, int64_t num_heads);
  // x by value: the block hands over its normalised input, freed once the first product has read (under autocast,
  // cast) it rather than held through the branch. [N, T, D] -> [N, T, D], attending over each row's T tokens; with
  // `frames` > 0 (a temporal block) the rows are (b f) with f = frames instead, and each token attends over the
  // same token of its sample's frames: the layout change is made by the copies that lay out q, k and v and that
  // gather the heads' context anyway, so the residual stream never changes layout.
  torch::Tensor forward(torch::Tensor x, nn::BlockRunner* runner = nullptr, int64_t frames = 0);

  int64_t num_heads, head_dim;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(LatteAttention);

// timm Mlp: fc1 -> GELU (tanh approximation, an activation region of `runner`) -> fc2.
class LatteMlpImpl : public torch::nn::Module {
 public:
  LatteMlpImpl(int64_t hidden_size, int64_t inner_size);
  torch::Tensor forward(torch::Tensor x, nn::BlockRunner* runner = nullptr);  // x by value, as LatteAttention's

  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(LatteMlp);

// adaLN-Zero block: (shift, scale, gate) x 2 = adaLN_modulation(c).chunk(6);
// x + gate_msa * attn(modulate(norm1(x))), then + gate_mlp * mlp(modulate(norm2(x))). norm1/norm2 are
// LayerNorm without affine (eps 1e-6), so they hold no parameters and appear in no checkpoint. The norms, the
// attention core and the GELU run as regions of `runner` (selective checkpointing); null: plain calls.
class LatteBlockImpl : public torch::nn::Module {
 public:
  explicit LatteBlockImpl(const LatteConfig& config);
  // x [N, T, D], c [N / r, D] with r = rows_per_condition: row i of c conditions rows i*r .. i*r + r-1 of x. The
  // official code repeats c per row before the modulation linear; the result is the same, computed once per
  // condition. Attention over each row's T tokens, or with `temporal_frames` > 0 over the frames at each token
  // (LatteAttentionImpl::forward's `frames`): a spatial block and a temporal one both take (b f) t d.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& c, nn::BlockRunner* runner = nullptr,
                        int64_t rows_per_condition = 1, int64_t temporal_frames = 0);

  LatteAttention attn{nullptr};
  LatteMlp mlp{nullptr};
  torch::nn::Sequential adaLN_modulation{nullptr};  // SiLU, Linear(D, 6D): adaLN_modulation.1.{weight,bias}
};
TORCH_MODULE(LatteBlock);

// norm_final (no affine) -> modulate with (shift, scale) = adaLN_modulation(c).chunk(2) -> linear to p*p*out.
class LatteFinalLayerImpl : public torch::nn::Module {
 public:
  explicit LatteFinalLayerImpl(const LatteConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& c);  // [N, T, D] -> [N, T, p*p*out]

  torch::nn::Linear linear{nullptr};
  torch::nn::Sequential adaLN_modulation{nullptr};  // SiLU, Linear(D, 2D)
};
TORCH_MODULE(LatteFinalLayer);

// DiT's LabelEmbedder: embedding_table [num_classes (+1 null class when dropout_prob > 0), D]. Labels are
// replaced by the null class (index num_classes) with probability dropout_prob when training, or where
// force_drop_ids == 1 (classifier-free guidance).
class LabelEmbedderImpl : public torch::nn::Module {
 public:
  LabelEmbedderImpl(int64_t num_classes, int64_t hidden_size, double dropout_prob);
  // labels [N] int64; force_drop_ids undefined or [N] (1 = drop). Throws when dropping is asked of an embedder
  // without a null class (dropout_prob 0), where the official code would index out of range.
  torch::Tensor forward(const torch::Tensor& labels, bool train, const torch::Tensor& force_drop_ids = {});
  torch::Tensor drop_labels(const torch::Tensor& labels, const torch::Tensor& force_drop_ids) const;

  int64_t num_classes;
  double dropout_prob;
  torch::nn::Embedding embedding_table{nullptr};
};
TORCH_MODULE(LabelEmbedder);

}  // namespace tune::models
