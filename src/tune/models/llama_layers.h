// The building blocks of a Llama-family decoder: attention with grouped-query heads and RoPE (Qwen3: per-head
// query/key norms; Gemma 2: its own scale and soft-capped scores), the gated MLP, the pre-norm decoder layer (Gemma 2:
// with normalised attention and MLP outputs), and the "model" trunk that holds them under Hugging Face's module names.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>

#include "tune/models/llama_config.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/lora_linear.h"
#include "tune/nn/rms_norm.h"
#include "tune/nn/rotary_embedding.h"

namespace tune::models {

struct LlamaLoraOptions;

// What one layer needs besides its hidden states; computed once per forward and shared by all layers.
struct LayerInputs {
  torch::Tensor cos;            // [B, T, head_dim] float32, from the positions
  torch::Tensor sin;
  torch::Tensor mask;           // [B or 1, 1, T, cached + T] additive (nn/attention_mask.h), with the layer's window
  bool causal_mask = false;     // mask is the plain causal one (no cache, one segment): fused kernels may drop it
  torch::Tensor* cached_keys = nullptr;    // decoding: this layer's cache slots (grown in place), else null
  torch::Tensor* cached_values = nullptr;
  int64_t sliding_window = 0;   // the layer's window (0: none); decoding keeps only the last window - 1 keys
  // Runs the layer's norm, attention-core and activation regions (selective checkpointing); null: plain calls.
  // Shared, not raw: a recompute in backward may use it after the model's forward has returned.
  std::shared_ptr<nn::BlockRunner> runner;
};

// LoRA (or an inference-only model, all_frozen) with lora.base_dtype other than fp32: stores `module`'s non-LoRA
// parameters (the frozen ones) in that dtype. Called on each module as it is built (see
// LlamaLoraOptions::base_dtype); a no-op when every weight trains, or for fp32.
void store_base_weights(torch::nn::Module& module, const LlamaLoraOptions& lora);

// A projection that carries a LoRA adapter iff `name` (e.g. "q_proj") is among the LoRA target modules.
nn::LoraLinear make_projection(int64_t in_features, int64_t out_features, bool bias, const std::string& name,
                               const LlamaLoraOptions& lora);

// Self-attention: q/k/v projections, (Qwen3) RMSNorm over head_dim on each query and key head as norm regions of
// `inputs.runner`, RoPE on q and k, kv heads repeated to the query heads (GQA), scores scaled by 1/sqrt(head_dim),
// additive mask (causal, or with the layer's sliding window), softmax in fp32, o projection. Everything between
// RoPE and o_proj runs as the attention-core region of `inputs.runner`. Gemma 2: the scale is
// query_pre_attn_scalar^-0.5 and the scores are soft-capped (LlamaConfig::attn_logit_softcapping) before the mask,
// which keeps it on tune's own attention core (the fused kernels cannot cap).
class LlamaAttentionImpl : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const LlamaConfig& config, const LlamaLoraOptions& lora);
  torch::Tensor forward(const torch::Tensor& hidden, const LayerInputs& inputs);

  int64_t num_heads, num_key_value_heads, head_dim;
  double scale;    // applied to the scores
  double softcap;  // 0: none
  nn::LoraLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  nn::RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3 only (LlamaConfig::has_qk_norm)
};
TORCH_MODULE(LlamaAttention);

// The gated MLP's activation, by HF hidden_act name (kSupportedHiddenActs): silu/swish x * sigmoid(x); gelu
// x * Phi(x) with the erf; gelu_pytorch_tanh/gelu_new the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class HiddenActivation { silu, gelu, gelu_tanh };
HiddenActivation hidden_activation_from_name(const std::string& hidden_act);  // std::invalid_argument if unknown
torch::Tensor apply_hidden_activation(HiddenActivation activation, const torch::Tensor& x);

// Gated MLP: down(act(gate(x)) * up(x)) (act = SiLU: SwiGLU; GELU: GeGLU); act(gate) * up runs as an activation
// region of `runner` (null: plain).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  LlamaMLPImpl(const LlamaConfig& config, const LlamaLoraOptions& lora);
  torch::Tensor forward(const torch::Tensor& hidden, nn::BlockRunner* runner = nullptr);

  HiddenActivation activation;
  nn::LoraLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

// Pre-norm residual block: h + attn(norm(h)), then h + mlp(norm(h)). Gemma 2 ("sandwich" norms):
// h + post_attention_layernorm(attn(input_layernorm(h))), then h + post_feedforward_layernorm(mlp(
// pre_feedforward_layernorm(h))); its post_attention_layernorm thus normalises the attention output, where Llama's
// of that name is the MLP's input norm. The unit the block runner executes; the norms run as norm regions of
// `inputs.runner`.
class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  LlamaDecoderLayerImpl(const LlamaConfig& config, const LlamaLoraOptions& lora);
  torch::Tensor forward(const torch::Tensor& hidden, const LayerInputs& inputs);

  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  nn::RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  nn::RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};  // Gemma 2 only
};
TORCH_MODULE(LlamaDecoderLayer);

// The trunk registered as "model": embed_tokens, layers, norm (and the parameter-free rotary_emb). Its forward
// lives in LlamaForCausalLM, which owns the block runner. Gemma 2's embeddings are multiplied by
// embedding_multiplier (sqrt(hidden_size), rounded to the embedding's dtype as transformers does).
class LlamaModelImpl : public torch::nn::Module {
 public:
  LlamaModelImpl(const LlamaConfig& config, const LlamaLoraOptions& lora);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  nn::RMSNorm norm{nullptr};
  nn::RotaryEmbedding rotary_emb{nullptr};
  double embedding_multiplier = 1.0;
};
TORCH_MODULE(LlamaModel);

// The RMSNorm options of a config's norms (Gemma 2: zero-centred weights).
nn::RMSNormOptions norm_options(const LlamaConfig& config, int64_t size);

// The RoPE options a config implies (theta, head_dim, Llama 3 scaling).
nn::RotaryEmbeddingOptions rotary_options(const LlamaConfig& config);

}  // namespace tune::models
