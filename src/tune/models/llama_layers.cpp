// Llama-family layers; module and parameter names are Hugging Face's so named_parameters() are HF tensor names.
#include "tune/models/llama_layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tune/models/llama.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/gelu_tanh.h"
#include "tune/nn/rms_norm_cpu.h"
#include "tune/nn/swiglu_cpu.h"

namespace tune::models {

void store_base_weights(torch::nn::Module& module, const LlamaLoraOptions& lora) {
  if ((lora.lora.rank == 0 && !lora.all_frozen) || lora.base_dtype == torch::kFloat32) return;
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    if (item.key().find("lora_") != std::string::npos || item.value().scalar_type() == lora.base_dtype) continue;
    item.value().set_data(item.value().to(lora.base_dtype));  // the fp32 storage is freed here
  }
}

nn::LoraLinear make_projection(int64_t in_features, int64_t out_features, bool bias, const std::string& name,
                               const LlamaLoraOptions& lora) {
  nn::LoraLinearOptions options(in_features, out_features);
  options.bias(bias);
  const auto& targets = lora.target_modules;
  if (lora.lora.rank > 0 && std::find(targets.begin(), targets.end(), name) != targets.end()) {
    options.lora(lora.lora);
  }
  const auto& nf4 = lora.nf4_modules;
  options.nf4_base(std::find(nf4.begin(), nf4.end(), name) != nf4.end());
  return nn::LoraLinear(options);
}

nn::RotaryEmbeddingOptions rotary_options(const LlamaConfig& config) {
  nn::RotaryEmbeddingOptions options(config.resolved_head_dim());
  options.theta(config.rope_theta);
  if (config.rope_scaling.rope_type == "llama3") {
    nn::Llama3RopeScalingOptions scaling;
    scaling.factor = config.rope_scaling.factor;
    scaling.low_freq_factor = config.rope_scaling.low_freq_factor;
    scaling.high_freq_factor = config.rope_scaling.high_freq_factor;
    scaling.original_max_position_embeddings = config.rope_scaling.original_max_position_embeddings;
    options.llama3_scaling(scaling);
  }
  return options;
}

namespace {

// A region's trainable parameters: `weight` if it requires grad (a frozen norm has none).
std::vector<torch::Tensor> trainable(const torch::Tensor& weight) {
  return weight.requires_grad() ? std::vector<torch::Tensor>{weight} : std::vector<torch::Tensor>{};
}

// `norm(hidden)` as a norm region of `runner`.
torch::Tensor run_norm(const nn::RMSNorm& norm, const torch::Tensor& hidden, nn::BlockRunner* runner) {
  // The CPU kernel keeps the input alone (and a per-row rstd), what selective's region would keep: no recompute.
  if (nn::rms_norm_cpu_fits(hidden, norm->weight)) return norm.ptr()->forward(hidden);
  std::shared_ptr<nn::RMSNormImpl> module = norm.ptr();  // owned by the region: it may run again in backward
  auto region = [module](const std::vector<torch::Tensor>& inputs) { return module->forward(inputs[0]); };
  return nn::run_region(runner, nn::RegionKind::norm, region, {hidden}, trainable(module->weight));
}

}  // namespace

nn::RMSNormOptions norm_options(const LlamaConfig& config, int64_t size) {
  return nn::RMSNormOptions(size).eps(config.rms_norm_eps).zero_centred(config.is_gemma2());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& config, const LlamaLoraOptions& lora)
    : num_heads(config.num_attention_heads),
      num_key_value_heads(config.num_key_value_heads),
      head_dim(config.resolved_head_dim()),
      scale(config.attention_scale()),
      softcap(config.attn_logit_softcapping) {
  const int64_t hidden = config.hidden_size;
  // Qwen2 has q/k/v biases but none on o_proj; the attention_bias of Llama and Qwen3 covers all four.
  const bool qkv_bias = config.attention_bias;
  const bool o_bias = config.attention_bias && config.model_type != "qwen2";
  q_proj = register_module("q_proj", make_projection(hidden, num_heads * head_dim, qkv_bias, "q_proj", lora));
  k_proj = register_module("k_proj", make_projection(hidden, num_key_value_heads * head_dim, qkv_bias, "k_proj", lora));
  v_proj = register_module("v_proj", make_projection(hidden, num_key_value_heads * head_dim, qkv_bias, "v_proj", lora));
  o_proj = register_module("o_proj", make_projection(num_heads * head_dim, hidden, o_bias, "o_proj", lora));
  if (config.has_qk_norm()) {
    // Over head_dim only, one weight shared by every head (Qwen3Attention), with the model's rms_norm_eps.
    const auto options = norm_options(config, head_dim);
    q_norm = register_module("q_norm", nn::RMSNorm(options));
    k_norm = register_module("k_norm", nn::RMSNorm(options));
  }
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& hidden, const LayerInputs& inputs) {
  const int64_t batch = hidden.size(0);
  const int64_t length = hidden.size(1);
  nn::BlockRunner* runner = inputs.runner.get();
  torch::Tensor query = q_proj(hidden).reshape({batch, length, num_heads, head_dim});
  torch::Tensor key = k_proj(hidden).reshape({batch, length, num_key_value_heads, head_dim});
  if (!q_norm.is_empty()) {
    // Qwen3: on [B, T, heads, head_dim] (the norm acts on the last dimension), after the projection, before RoPE.
    query = run_norm(q_norm, query, runner);
    key = run_norm(k_norm, key, runner);
  }
  query = query.transpose(1, 2);
  key = key.transpose(1, 2);
  torch::Tensor value = v_proj(hidden).reshape({batch, length, num_key_value_heads, head_dim}).transpose(1, 2);
  query = nn::apply_rotary_embedding(query, inputs.cos, inputs.sin);
  key = nn::apply_rotary_embedding(key, inputs.cos, inputs.sin);

  if (inputs.cached_keys != nullptr) {
    // The cache holds rotated keys, so earlier positions never need their RoPE recomputed.
    torch::Tensor& cached_keys = *inputs.cached_keys;
    torch::Tensor& cached_values = *inputs.cached_values;
    if (cached_keys.defined()) {
      key = torch::cat({cached_keys, key.to(cached_keys.scalar_type())}, 2);
      value = torch::cat({cached_values, value.to(cached_values.scalar_type())}, 2);
    }
    // A sliding-window layer's later queries see at most the window - 1 keys before them: the rest is dropped,
    // so the cache stays bounded however long generation runs (transformers' sliding-window cache layers do too).
    const int64_t keep = inputs.sliding_window > 0 ? std::min(key.size(2), inputs.sliding_window - 1) : key.size(2);
    cached_keys = key.slice(2, key.size(2) - keep);
    cached_values = value.slice(2, value.size(2) - keep);
  }

  const torch::Tensor context = nn::run_attention_core(inputs.runner.get(), query, key, value, inputs.mask, scale,
                                                        inputs.causal_mask, softcap);
  return o_proj(context.transpose(1, 2).reshape({batch, length, num_heads * head_dim}));
}

HiddenActivation hidden_activation_from_name(const std::string& hidden_act) {
  if (hidden_act == "silu" || hidden_act == "swish") return HiddenActivation::silu;
  if (hidden_act == "gelu") return HiddenActivation::gelu;
  // gelu_new is HF's Python spelling of the same tanh formula (rounding differs in the last bits).
  if (hidden_act == "gelu_pytorch_tanh" || hidden_act == "gelu_new") return HiddenActivation::gelu_tanh;
  throw std::invalid_argument(fmt::format("hidden_act '{}' is not implemented by tune's MLP (supported: {})", hidden_act,
                                          fmt::join(kSupportedHiddenActs, ", ")));
}

torch::Tensor apply_hidden_activation(HiddenActivation activation, const torch::Tensor& x) {
  switch (activation) {
    case HiddenActivation::silu: return torch::silu(x);
    case HiddenActivation::gelu: return torch::gelu(x);
    case HiddenActivation::gelu_tanh: return nn::gelu_tanh_differentiable(x);
  }
  throw std::logic_error("apply_hidden_activation: unknown activation");
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& config, const LlamaLoraOptions& lora)
    : activation(hidden_activation_from_name(config.hidden_act)) {
  const int64_t hidden = config.hidden_size;
  const int64_t inner = config.intermediate_size;
  gate_proj = register_module("gate_proj", make_projection(hidden, inner, config.mlp_bias, "gate_proj", lora));
  up_proj = register_module("up_proj", make_projection(hidden, inner, config.mlp_bias, "up_proj", lora));
  down_proj = register_module("down_proj", make_projection(inner, hidden, config.mlp_bias, "down_proj", lora));
}

torch::Tensor LlamaMLPImpl::forward(const torch::Tensor& hidden, nn::BlockRunner* runner) {
  const torch::Tensor gate = gate_proj(hidden), up = up_proj(hidden);
  // bf16 on the CPU (autocast's projection outputs): one kernel each way, keeping gate and up alone, what
  // selective's region would keep, so it runs as it is (no recompute).
  if (activation == HiddenActivation::silu && nn::swiglu_cpu_fits(gate, up)) {
    return down_proj(nn::swiglu_cpu(gate, up));
  }
  auto gated = [activation = activation](const std::vector<torch::Tensor>& inputs) {
    return apply_hidden_activation(activation, inputs[0]) * inputs[1];
  };
  return down_proj(nn::run_region(runner, nn::RegionKind::activation, gated, {gate, up}));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& config, const LlamaLoraOptions& lora) {
  // Registration order = HF's, so named_parameters() lists tensors in the order HF checkpoints do.
  self_attn = register_module("self_attn", LlamaAttention(config, lora));
  mlp = register_module("mlp", LlamaMLP(config, lora));
  const auto options = norm_options(config, config.hidden_size);
  input_layernorm = register_module("input_layernorm", nn::RMSNorm(options));
  post_attention_layernorm = register_module("post_attention_layernorm", nn::RMSNorm(options));
  if (config.is_gemma2()) {
    pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", nn::RMSNorm(options));
    post_feedforward_layernorm = register_module("post_feedforward_layernorm", nn::RMSNorm(options));
  }
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& hidden, const LayerInputs& inputs) {
  nn::BlockRunner* runner = inputs.runner.get();
  if (pre_feedforward_layernorm.is_empty()) {
    const torch::Tensor attended = hidden + self_attn(run_norm(input_layernorm, hidden, runner), inputs);
    return attended + mlp(run_norm(post_attention_layernorm, attended, runner), runner);
  }
  // Gemma 2: each sublayer's output is normalised before it joins the residual stream.
  const torch::Tensor attention = self_attn(run_norm(input_layernorm, hidden, runner), inputs);
  const torch::Tensor attended = hidden + run_norm(post_attention_layernorm, attention, runner);
  const torch::Tensor fed = mlp(run_norm(pre_feedforward_layernorm, attended, runner), runner);
  return attended + run_norm(post_feedforward_layernorm, fed, runner);
}

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& config, const LlamaLoraOptions& lora) {
  // With LoRA and a bf16 base, each module's frozen weights are converted before the next is built (base_dtype).
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(config.vocab_size, config.hidden_size));
  store_base_weights(*embed_tokens, lora);
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    LlamaDecoderLayer layer(config, lora);
    store_base_weights(*layer, lora);
    layers->push_back(layer);
  }
  norm = register_module("norm", nn::RMSNorm(norm_options(config, config.hidden_size)));
  store_base_weights(*norm, lora);
  rotary_emb = register_module("rotary_emb", nn::RotaryEmbedding(rotary_options(config)));
  embedding_multiplier = config.embedding_multiplier();
}

}  // namespace tune::models
