// Latte layers, written from the official models/latte.py semantics (timm Attention/Mlp, DiT adaLN-Zero).
#include "tune/models/latte_layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <utility>

#include "tune/core/error.h"
#include "tune/nn/adaln.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/frame_attention.h"
#include "tune/nn/gelu_linear.h"
#include "tune/nn/linear.h"

namespace tune::models {

namespace {

constexpr double kNormEps = 1e-6;

// adaLN: the parameter-free LayerNorm modulated by shift and scale, one autograd node (nn::modulated_layer_norm:
// keeps x and the row statistics, not the fp32 normalised x) and one norm region of `runner` (selective recomputes
// it whole). Its output feeds a linear alone, so under autocast it is written in the compute dtype (the values of
// the fp32 output's cast, without that tensor and the cast's pass).
torch::Tensor run_modulated_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                 nn::BlockRunner* runner) {
  return nn::run_modulated_layer_norm(runner, x, shift, scale, kNormEps, nn::autocast_compute_dtype(x.device()));
}

}  // namespace

LatteAttentionImpl::LatteAttentionImpl(int64_t hidden_size, int64_t num_heads_)
    : num_heads(num_heads_), head_dim(hidden_size / num_heads_) {
  qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(hidden_size, 3 * hidden_size).bias(true)));
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(hidden_size, hidden_size).bias(true)));
}

torch::Tensor LatteAttentionImpl::forward(torch::Tensor x, nn::BlockRunner* runner, int64_t frames) {
  const int64_t rows = x.size(0);
  const int64_t length = x.size(1);
  torch::Tensor projected = nn::linear(qkv, x);
  x.reset();  // the norm's fp32 output: what backward needs of it, the product keeps (header comment)
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const int64_t samples = frames > 0 ? rows / frames : rows;
  if (frames > 0) {
    // On the CPU, attention over the frames straight from the projection into token rows (nn/frame_attention.h):
    // none of the copies below, and no batches of tiny products.
    torch::Tensor by_frames = projected.reshape({samples, frames, length, 3 * num_heads * head_dim});
    projected.reset();
    if (nn::frame_attention_applies(by_frames)) {
      const torch::Tensor context = nn::frame_attention(by_frames, num_heads, scale);
      by_frames.reset();
      return nn::linear(proj, context.view({rows, length, num_heads * head_dim}));
    }
    projected = std::move(by_frames);
  }
  // Spatial: [N, T, 3, H, hd] -> [3, N, H, T, hd]. Temporal: [B, F, T, 3, H, hd] -> [3, B, T, H, F, hd], the
  // sequences being the frames at one token of one sample.
  // unbind rather than three selects: its backward stacks the three gradients into one tensor, where each select's
  // would fill a zero tensor of the whole qkv output. Laid out contiguously once (what autograd keeps instead of the
  // product, the same bytes): every attention product, forward and backward, takes q, k and v as [sequences * H,
  // length, hd] batches, which the permuted view cannot give without a copy inside each product.
  const auto q_k_v =
      frames > 0
          ? projected.reshape({samples, frames, length, 3, num_heads, head_dim})
                .permute({3, 0, 2, 4, 1, 5})
                .contiguous()
                .reshape({3, samples * length, num_heads, frames, head_dim})
                .unbind(0)
          : projected.reshape({rows, length, 3, num_heads, head_dim}).permute({2, 0, 3, 1, 4}).contiguous().unbind(0);
  projected.reset();
  const torch::Tensor context = nn::run_attention_core(runner, q_k_v[0], q_k_v[1], q_k_v[2], torch::Tensor(), scale);
  // Back to [N, T, H * hd] rows for proj, in the same copy that gathers the heads.
  const torch::Tensor rows_of_tokens =
      frames > 0 ? context.view({samples, length, num_heads, frames, head_dim}).permute({0, 3, 1, 2, 4})
                 : context.transpose(1, 2);
  return nn::linear(proj, rows_of_tokens.reshape({rows, length, num_heads * head_dim}));
}

LatteMlpImpl::LatteMlpImpl(int64_t hidden_size, int64_t inner_size) {
  fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(hidden_size, inner_size).bias(true)));
  fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(inner_size, hidden_size).bias(true)));
}

torch::Tensor LatteMlpImpl::forward(torch::Tensor x, nn::BlockRunner* runner) {
  torch::Tensor hidden = nn::linear(fc1, x);
  x.reset();  // as in LatteAttentionImpl::forward
  // GELU recomputed in fc2's backward wherever the block's graph lives until backward (nn::run_gelu_linear).
  return nn::run_gelu_linear(runner, fc2, hidden);
}

LatteBlockImpl::LatteBlockImpl(const LatteConfig& config) {
  attn = register_module("attn", LatteAttention(config.hidden_size, config.num_heads));
  mlp = register_module("mlp", LatteMlp(config.hidden_size, config.mlp_hidden_size()));
  adaLN_modulation = register_module("adaLN_modulation", nn::adaln_modulation(config.hidden_size, 6));
}

torch::Tensor LatteBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& c, nn::BlockRunner* runner,
                                      int64_t rows_per_condition, int64_t temporal_frames) {
  torch::Tensor modulation = nn::adaln_modulate(adaLN_modulation, c);
  if (rows_per_condition > 1) modulation = modulation.repeat_interleave(rows_per_condition, 0);
  const auto chunks = modulation.chunk(6, 1);
  const auto &shift_msa = chunks[0], &scale_msa = chunks[1], &gate_msa = chunks[2];
  const auto &shift_mlp = chunks[3], &scale_mlp = chunks[4], &gate_mlp = chunks[5];
  const torch::Tensor attention =
      attn->forward(run_modulated_norm(x, shift_msa, scale_msa, runner), runner, temporal_frames);
  if (runner != nullptr && runner->recomputes(nn::RegionKind::norm)) {
    // Selective checkpointing recomputes each norm region from its inputs: the residual sum is one of them.
    const torch::Tensor attended = nn::gated_residual(x, gate_msa, attention);
    return nn::gated_residual(attended, gate_mlp,
                              mlp->forward(run_modulated_norm(attended, shift_mlp, scale_mlp, runner), runner));
  }
  // The gated residual and the second norm as one node, which recomputes the residual sum in backward from x and
  // the attention output (both kept anyway) instead of keeping it: 6 MiB a block at Latte-S/2's 4096 tokens.
  nn::GatedResidualNorm attended =
      nn::gated_residual_modulated_layer_norm(x, gate_msa, attention, shift_mlp, scale_mlp, kNormEps,
                                              nn::autocast_compute_dtype(x.device()));
  return nn::gated_residual(attended.sum, gate_mlp, mlp->forward(std::move(attended.normed), runner));
}

LatteFinalLayerImpl::LatteFinalLayerImpl(const LatteConfig& config) {
  linear = register_module("linear", torch::nn::Linear(torch::nn::LinearOptions(
                                         config.hidden_size, config.patch_size * config.patch_size * config.out_channels())
                                                                .bias(true)));
  adaLN_modulation = register_module("adaLN_modulation", nn::adaln_modulation(config.hidden_size, 2));
}

torch::Tensor LatteFinalLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& c) {
  const auto chunks = nn::adaln_modulate(adaLN_modulation, c).chunk(2, 1);
  return nn::linear(linear,
                    nn::modulated_layer_norm(x, chunks[0], chunks[1], kNormEps, nn::autocast_compute_dtype(x.device())));
}

LabelEmbedderImpl::LabelEmbedderImpl(int64_t num_classes_, int64_t hidden_size, double dropout_prob_)
    : num_classes(num_classes_), dropout_prob(dropout_prob_) {
  const int64_t rows = num_classes + (dropout_prob > 0 ? 1 : 0);
  embedding_table = register_module("embedding_table", torch::nn::Embedding(rows, hidden_size));
}

torch::Tensor LabelEmbedderImpl::drop_labels(const torch::Tensor& labels, const torch::Tensor& force_drop_ids) const {
  if (dropout_prob <= 0) {
    throw UsageError(fmt::format(
        "class labels cannot be dropped: class_dropout_prob is {}, so the embedding table has no null class. "
        "---> HINT: build the model with class_dropout_prob > 0 to use classifier-free guidance", dropout_prob));
  }
  torch::Tensor drop;
  if (force_drop_ids.defined()) {
    if (force_drop_ids.sizes() != labels.sizes()) {
      throw std::invalid_argument(fmt::format("force_drop_ids must have the labels' shape [{}], got [{}]",
                                              fmt::join(labels.sizes(), ", "), fmt::join(force_drop_ids.sizes(), ", ")));
    }
    drop = force_drop_ids.to(labels.device()) == 1;
  } else {
    drop = torch::rand({labels.size(0)}, torch::TensorOptions().device(labels.device())) < dropout_prob;
  }
  return torch::where(drop, torch::full_like(labels, num_classes), labels);
}

torch::Tensor LabelEmbedderImpl::forward(const torch::Tensor& labels, bool train, const torch::Tensor& force_drop_ids) {
  if (labels.dim() != 1) {
    throw std::invalid_argument(fmt::format("class labels must be [batch], got [{}]", fmt::join(labels.sizes(), ", ")));
  }
  torch::Tensor ids = labels.to(torch::kInt64);
  if ((train && dropout_prob > 0) || force_drop_ids.defined()) ids = drop_labels(ids, force_drop_ids);
  return embedding_table(ids);
}

}  // namespace tune::models
