// LlamaForCausalLM: embeddings -> decoder layers (through the block runner) -> final norm -> lm_head.
#include "tune/models/llama.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include "tune/compat/torch_compat.h"
#include "tune/core/error.h"
#include "tune/models/llama_layers.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/attention_mask.h"

namespace tune::models {
namespace {

const std::vector<std::string> kLoraTargets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

void check_lora_options(const LlamaLoraOptions& lora) {
  if (lora.lora.rank < 0) throw UsageError(fmt::format("LoRA rank must be >= 0, got {}", lora.lora.rank));
  if (lora.base_dtype != torch::kFloat32 && lora.base_dtype != torch::kBFloat16 && lora.base_dtype != torch::kHalf) {
    throw UsageError(fmt::format("the frozen base weights' dtype must be fp32, bf16 or fp16, got {}",
                                 c10::toString(lora.base_dtype)));
  }
  if (!lora.nf4_modules.empty() && lora.lora.rank == 0 && !lora.all_frozen) {
    throw UsageError("NF4 base weights need LoRA (rank > 0) or an inference-only model: NF4 weights cannot train");
  }
  if (lora.lora.rank == 0) {
    if (lora.base_dtype != torch::kFloat32 && !lora.all_frozen) {
      throw UsageError("a base weight dtype other than fp32 needs LoRA (rank > 0): without it every weight trains");
    }
    return;
  }
  if (lora.lora.dropout < 0.0 || lora.lora.dropout >= 1.0) {
    throw UsageError(fmt::format("LoRA dropout must be in [0, 1), got {}", lora.lora.dropout));
  }
  if (lora.target_modules.empty()) {
    throw UsageError(fmt::format("LoRA target_modules is empty; choose among {}", fmt::join(kLoraTargets, ", ")));
  }
  for (const auto& target : lora.target_modules) {
    if (std::find(kLoraTargets.begin(), kLoraTargets.end(), target) == kLoraTargets.end()) {
      throw UsageError(fmt::format("LoRA target module '{}' does not exist in a Llama-family model; choose among {}",
                                   target, fmt::join(kLoraTargets, ", ")));
    }
  }
}

std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> trainable;
  for (const auto& parameter : module.parameters()) {
    if (parameter.requires_grad()) trainable.push_back(parameter);
  }
  return trainable;
}

// The dtype the attention matmuls run in: the autocast dtype inside an autocast scope, else the activations' own.
c10::ScalarType attention_compute_dtype(const torch::Device& device, c10::ScalarType activations) {
  if (device.is_cuda()) return compat::autocast_cuda_enabled() ? compat::autocast_cuda_dtype() : activations;
  return compat::autocast_cpu_enabled() ? compat::autocast_cpu_dtype() : activations;
}

}  // namespace

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& config, const LlamaLoraOptions& lora)
    : config_(config), lora_(lora), runner_(std::make_shared<nn::PlainBlockRunner>()) {
  check_lora_options(lora_);
  model_ = register_module("model", std::make_shared<LlamaModelImpl>(config_, lora_));
  if (!config_.tie_word_embeddings) {
    lm_head_ = register_module("lm_head", std::make_shared<nn::LoraLinearImpl>(
                                              nn::LoraLinearOptions(config_.hidden_size, config_.vocab_size)));
    store_base_weights(*lm_head_, lora_);
  }
}

torch::Tensor LlamaForCausalLMImpl::embed(const torch::Tensor& input_ids) {
  torch::Tensor embeddings = model_->embed_tokens(input_ids);
  if (model_->embedding_multiplier == 1.0) return embeddings;
  // Gemma 2: sqrt(hidden_size) as an fp32 number rounded to the embedding's dtype, as transformers' normalizer is.
  const torch::Tensor multiplier =
      torch::scalar_tensor(model_->embedding_multiplier, embeddings.options().dtype(torch::kFloat32))
          .to(embeddings.scalar_type());
  return embeddings * multiplier;
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& input_ids, AttentionInputs inputs) {
  if (input_ids.dim() != 2) {
    throw std::invalid_argument(fmt::format("input_ids must be [batch, length], got {}", fmt::join(input_ids.sizes(), "x")));
  }
  return forward_embeddings(embed(input_ids), std::move(inputs));
}

torch::Tensor LlamaForCausalLMImpl::forward_embeddings(const torch::Tensor& input_embeddings, AttentionInputs inputs) {
  const torch::Tensor hidden = hidden_states(input_embeddings, std::move(inputs));
  const torch::Tensor logits =
      lm_head_ ? lm_head_->forward(hidden) : torch::linear(hidden, model_->embed_tokens->weight);
  return soft_cap_logits(logits.to(torch::kFloat32), config_.final_logit_softcapping);
}

torch::Tensor LlamaForCausalLMImpl::forward_hidden(const torch::Tensor& input_ids, AttentionInputs inputs) {
  if (input_ids.dim() != 2) {
    throw std::invalid_argument(fmt::format("input_ids must be [batch, length], got {}", fmt::join(input_ids.sizes(), "x")));
  }
  return hidden_states(embed(input_ids), std::move(inputs));
}

torch::Tensor LlamaForCausalLMImpl::output_weight() const {
  return lm_head_ ? lm_head_->weight : model_->embed_tokens->weight;
}

torch::Tensor LlamaForCausalLMImpl::hidden_states(const torch::Tensor& input_embeddings, AttentionInputs inputs) {
  if (input_embeddings.dim() != 3 || input_embeddings.size(2) != config_.hidden_size) {
    throw std::invalid_argument(fmt::format("input embeddings must be [batch, length, {}], got {}", config_.hidden_size,
                                            fmt::join(input_embeddings.sizes(), "x")));
  }
  const int64_t batch = input_embeddings.size(0);
  const int64_t length = input_embeddings.size(1);
  const auto device = input_embeddings.device();
  KVCache* cache = inputs.cache;
  if (cache != nullptr) {
    cache->keys.resize(static_cast<size_t>(config_.num_hidden_layers));
    cache->values.resize(static_cast<size_t>(config_.num_hidden_layers));
  }
  const int64_t past = cache != nullptr ? cache->length() : 0;

  torch::Tensor positions = inputs.position_ids;
  if (!positions.defined()) {
    positions = torch::arange(past, past + length, torch::TensorOptions().dtype(torch::kInt64).device(device));
    positions = positions.unsqueeze(0).expand({batch, length});
  } else if (positions.dim() != 2 || positions.size(1) != length || (positions.size(0) != batch && positions.size(0) != 1)) {
    throw std::invalid_argument(fmt::format("position_ids must be [{}, {}], got {}", batch, length, fmt::join(positions.sizes(), "x")));
  }
  positions = positions.to(device, torch::kInt64);

  // Built once here rather than in every layer: they depend only on positions, segments and the layer's window
  // (one set per distinct window: Qwen2/Qwen3 may mix full and sliding layers).
  LayerInputs base_inputs;
  std::tie(base_inputs.cos, base_inputs.sin) = model_->rotary_emb(positions);
  if (cache == nullptr) base_inputs.runner = runner_;
  // Only the fused attention uses it (attention_core_fused drops such a mask for is_causal, whose kernels skip the
  // hidden half); the check of the segments costs a device sync on CUDA, nothing on the CPU.
  const c10::ScalarType attention_dtype = attention_compute_dtype(device, input_embeddings.scalar_type());
  const bool fused_attention =
      nn::uses_fused_attention(device.type(), attention_dtype, /*recomputing=*/false, config_.attn_logit_softcapping > 0);
  const bool plain_causal =
      fused_attention && past == 0 &&
      (!inputs.segment_ids.defined() || (inputs.allow_plain_causal && inputs.segment_ids.eq(0).all().item<bool>()));
  std::map<int64_t, LayerInputs> by_window;
  std::vector<LayerInputs> layer_inputs;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const int64_t window = config_.layer_sliding_window(i);
    auto found = by_window.find(window);
    if (found == by_window.end()) {
      LayerInputs for_window = base_inputs;
      for_window.sliding_window = window;
      for_window.mask = nn::make_causal_mask(length, past, inputs.segment_ids, device, window);
      // The fused kernels take the mask in the queries' dtype: converted once here rather than by every layer
      // (each would keep its own copy for backward).
      if (fused_attention) for_window.mask = for_window.mask.to(attention_dtype);
      if (cache != nullptr) {
        // A sliding layer's cache holds only its last window - 1 keys: the mask's columns for the dropped (all
        // hidden) keys go too.
        const torch::Tensor& cached = cache->keys[static_cast<size_t>(i)];
        const int64_t kept = cached.defined() ? cached.size(2) : 0;
        if (kept > past || (window == 0 && kept != past)) {
          throw std::logic_error(fmt::format("KV cache of layer {} holds {} positions, {} decoded", i, kept, past));
        }
        for_window.mask = for_window.mask.slice(-1, past - kept);
      }
      // A window at least as long as the sequence hides nothing the causal mask does not.
      for_window.causal_mask = plain_causal && (window == 0 || window >= length);
      found = by_window.emplace(window, for_window).first;
    }
    layer_inputs.push_back(found->second);
  }

  torch::Tensor hidden = input_embeddings;
  if (cache != nullptr) {
    // Decoding mutates the cache, so each block must run exactly once: never through a recomputing runner.
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      LayerInputs with_cache = layer_inputs[static_cast<size_t>(i)];
      with_cache.cached_keys = &cache->keys[static_cast<size_t>(i)];
      with_cache.cached_values = &cache->values[static_cast<size_t>(i)];
      hidden = model_->layers->ptr<LlamaDecoderLayerImpl>(i)->forward(hidden, with_cache);
    }
    cache->tokens = past + length;
  } else {
    std::vector<std::shared_ptr<LlamaDecoderLayerImpl>> layers;
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) layers.push_back(model_->layers->ptr<LlamaDecoderLayerImpl>(i));
    // Captured by value: a checkpointing runner calls the blocks again in backward, after this frame is gone.
    auto block = [layers, layer_inputs](int64_t i, const torch::Tensor& h) {
      return layers[static_cast<size_t>(i)]->forward(h, layer_inputs[static_cast<size_t>(i)]);
    };
    auto params_of = [&layers](int64_t i) { return trainable_parameters(*layers[static_cast<size_t>(i)]); };
    hidden = runner_->run_stack(config_.num_hidden_layers, block, hidden, params_of);
  }
  return model_->norm(hidden);
}

torch::Tensor soft_cap_logits(const torch::Tensor& logits, double cap) {
  if (cap <= 0.0) return logits;
  return torch::tanh(logits / cap) * cap;
}

std::vector<std::shared_ptr<torch::nn::Module>> LlamaForCausalLMImpl::blocks() const {
  std::vector<std::shared_ptr<torch::nn::Module>> result;
  for (const auto& layer : *model_->layers) result.push_back(layer);
  return result;
}

void LlamaForCausalLMImpl::freeze_base_weights() {
  for (auto& item : named_parameters()) {
    if (item.key().find("lora_") == std::string::npos) item.value().set_requires_grad(false);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> LlamaForCausalLMImpl::merged_state() const {
  torch::NoGradGuard no_grad;
  // Merged weights of every adapted projection, keyed by the HF name of its base weight.
  // Module by module in registration order (HF's); an NF4 projection has no weight parameter, so its (dequantised,
  // merged) weight is emitted where the parameter would stand, before its bias.
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& item : named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    if (prefix.find("lora_") != std::string::npos) continue;
    const auto* linear = dynamic_cast<const nn::LoraLinearImpl*>(item.value().get());
    for (const auto& param : item.value()->named_parameters(/*recurse=*/false)) {
      if (linear != nullptr && param.key() == "weight") continue;
      if (linear != nullptr && param.key() == "bias") state.emplace_back(prefix + "weight", linear->merged_weight());
      state.emplace_back(prefix + param.key(), param.value().detach().clone());
    }
    if (linear != nullptr && !linear->bias.defined()) state.emplace_back(prefix + "weight", linear->merged_weight());
  }
  return state;
}

}  // namespace tune::models
