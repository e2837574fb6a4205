// The FLOP counts behind the planner's relative step time (step_flops.h).
//
// Per token and decoder layer, with H hidden, Q = heads x head_dim, K = kv_heads x head_dim, I intermediate, T the
// sequence, V the vocabulary:
//   projections   2 (H (Q + 2K) + Q H + 3 H I)           a matmul is 2 FLOPs per multiply-add
//   LoRA          2 r (in + out) per adapted projection
//   attention     4 T Q                                  scores q k^T and context p v, over the whole [T, T]
//                                                        square (the CPU core and the masked kernels compute it)
//   elementwise   8 H + 5 heads T + 5 I                  norms, softmax, SwiGLU: small beside the matmuls
// Backward: a matmul with a trainable weight costs twice its forward (input and weight gradients), a frozen one
// (the LoRA base) once (input gradient only); attention and elementwise twice their forward. The head (lm_head and
// the loss) adds 2 H V forward, twice or once that in backward. The fused kernel's backward recomputes the scores
// (2 T Q more), tune's recomputing core's the scores and the softmax; its plain core's (a checkpointed layer's
// recompute on the CPU) neither.
// Recompute: policies full, sqrt and every_k run the forward of each checkpointed layer once more in backward;
// selective recomputes the norms and SwiGLU (elementwise).
#include "tune/recipes/sft/step_flops.h"

#include <algorithm>
#include <string>

namespace tune::recipes::sft {
namespace {

struct LayerFlops {
  double projections = 0;  // forward FLOPs of the base projections
  double adapters = 0;     // forward FLOPs of the LoRA adapters
  double attention = 0;    // scores and context
  double scores = 0;       // the scores alone (what a probability recompute repeats)
  double softmax = 0;
  double other_elementwise = 0;  // norms and SwiGLU
};

LayerFlops layer_flops(const models::LlamaConfig& config, const models::LlamaLoraOptions& lora, int64_t sequence) {
  const double hidden = static_cast<double>(config.hidden_size);
  const double head_dim = static_cast<double>(config.resolved_head_dim());
  const double q = config.num_attention_heads * head_dim, kv = config.num_key_value_heads * head_dim;
  const double inner = static_cast<double>(config.intermediate_size), t = static_cast<double>(sequence);
  LayerFlops flops;
  flops.projections = 2 * (hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inner);
  struct Projection {
    const char* name;
    double in, out;
  };
  const Projection projections[] = {{"q_proj", hidden, q},        {"k_proj", hidden, kv},    {"v_proj", hidden, kv},
                                    {"o_proj", q, hidden},        {"gate_proj", hidden, inner},
                                    {"up_proj", hidden, inner},   {"down_proj", inner, hidden}};
  if (lora.lora.rank > 0) {
    for (const Projection& p : projections) {
      if (std::find(lora.target_modules.begin(), lora.target_modules.end(), p.name) == lora.target_modules.end()) continue;
      flops.adapters += 2 * static_cast<double>(lora.lora.rank) * (p.in + p.out);
    }
  }
  flops.scores = 2 * t * q;
  flops.attention = 2 * flops.scores;
  flops.softmax = 5 * config.num_attention_heads * t;
  flops.other_elementwise = 8 * hidden + 5 * inner;
  return flops;
}

}  // namespace

StepFlops step_flops(const models::LlamaConfig& config, const models::LlamaLoraOptions& lora, int64_t sequence,
                     const memory::CheckpointRunner& runner, const AttentionCoreForms& attention) {
  const LayerFlops layer = layer_flops(config, lora, sequence);
  const bool frozen_base = lora.lora.rank > 0;
  const double layers = static_cast<double>(config.num_hidden_layers);
  const double head = 2.0 * static_cast<double>(config.hidden_size) * static_cast<double>(config.vocab_size);
  const double loss = 5.0 * static_cast<double>(config.vocab_size);
  const double elementwise = layer.softmax + layer.other_elementwise;
  // What the attention core's backward rebuilds, by form.
  auto core_rebuild = [&layer](nn::AttentionCoreForm form) {
    switch (form) {
      case nn::AttentionCoreForm::fused: return layer.scores;
      case nn::AttentionCoreForm::recomputing: return layer.scores + layer.softmax;
      case nn::AttentionCoreForm::plain: break;
    }
    return 0.0;
  };

  const double layer_forward = layer.projections + layer.adapters + layer.attention + elementwise;
  const double layer_backward = (frozen_base ? 1 : 2) * layer.projections + 2 * layer.adapters + 2 * layer.attention +
                                2 * elementwise + core_rebuild(attention.kept);
  StepFlops flops;
  flops.forward = layers * layer_forward + head + loss;
  // lm_head is never adapted: frozen under LoRA (input gradient only), trained otherwise.
  flops.backward = layers * layer_backward + (frozen_base ? 1 : 2) * head + loss;
  if (runner.policy() == memory::Policy::selective) {
    flops.recompute =
        layers * (layer.other_elementwise + core_rebuild(attention.selective) - core_rebuild(attention.kept));
  } else if (runner.policy() == memory::Policy::sqrt) {
    // Every layer's forward again; only each segment's last layer takes the recompute's core, the others keeping
    // their graphs through the later ones' backward take the kept form (nn::SegmentBlockScope).
    const int64_t segment = std::max<int64_t>(1, runner.segment_size());
    const double segments = static_cast<double>((config.num_hidden_layers + segment - 1) / segment);
    flops.recompute =
        layers * layer_forward + segments * (core_rebuild(attention.recomputed) - core_rebuild(attention.kept));
  } else {
    const double checkpointed = static_cast<double>(runner.checkpointed_blocks());
    flops.recompute =
        checkpointed * (layer_forward + core_rebuild(attention.recomputed) - core_rebuild(attention.kept));
  }
  return flops;
}

}  // namespace tune::recipes::sft
