// A Llama-family decoder-only LM (Llama 2/3, Mistral, Qwen2, Qwen3, Gemma 2): RMSNorm, rotate-half RoPE,
// grouped-query attention (Qwen3: RMSNorm on each query and key head; Mistral/Qwen/Gemma 2: optionally a sliding
// window; Gemma 2: soft-capped scores and logits, scaled embeddings, four norms per layer), gated MLP (SiLU or GELU). Submodule names equal Hugging Face's so named_parameters() are HF tensor names:
// model.embed_tokens.weight, model.layers.N.self_attn.{q,k,v,o}_proj.weight, model.layers.N.mlp.{gate,up,down}_proj.weight,
// model.layers.N.self_attn.{q,k}_norm.weight (Qwen3), model.layers.N.{input,post_attention}_layernorm.weight,
// model.layers.N.{pre,post}_feedforward_layernorm.weight (Gemma 2), model.norm.weight, lm_head.weight (absent when
// tied).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <memory>
#include <string>
#include <vector>

#include "tune/models/llama_config.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/lora_linear.h"

namespace tune::models {

class LlamaModelImpl;  // llama_layers.h

struct LlamaLoraOptions {
  nn::LoraOptions lora;                  // rank 0: no LoRA
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};  // any of q,k,v,o,gate,up,down _proj
  // With LoRA, the dtype of every non-LoRA (frozen) parameter: fp32, or bf16 (param_dtype: bf16). Each module's
  // are converted as soon as it is built, so the fp32 base model never exists at once (a 1B model: 2.5 GB, not
  // 4.9 GB then 2.5 GB). Their initial values are drawn in fp32 first, so the values, and the random stream LoRA's
  // own init draws from, equal building in fp32 and converting afterwards.
  torch::ScalarType base_dtype = torch::kFloat32;
  // An inference-only model: every parameter is frozen, so base_dtype applies to all of them, LoRA or not.
  bool all_frozen = false;
  // Projections (of every decoder layer) whose base weight is NF4 (QLoRA, lora.quantize_base: nf4, or a
  // pre-quantised checkpoint): no weight parameter, the weight quantised or read as the model loads. Empty: none.
  std::vector<std::string> nf4_modules;
  bool double_quant = true;  // lora.double_quant: how weights quantised by tune store their absmaxes
};

// Key/value cache for incremental decoding: per layer, [batch, kv_heads, cached_len, head_dim]. A layer with a
// sliding window w keeps only its last w - 1 keys and values (all a later query can see), so its cached_len may be
// shorter than length().
struct KVCache {
  std::vector<torch::Tensor> keys;
  std::vector<torch::Tensor> values;
  int64_t tokens = 0;  // positions decoded so far (the next token's position)
  int64_t length() const { return tokens; }
};

// What the attention layers need besides the hidden states.
struct AttentionInputs {
  torch::Tensor position_ids;  // [B, T] int64; positions restart at 0 for each packed sample
  torch::Tensor segment_ids;   // [B, T] int64 or undefined; tokens attend only within their segment (packing)
                               // and padding has segment -1 (attends to nothing, masked from the loss)
  KVCache* cache = nullptr;    // decoding: keys/values appended, attention over cache + new tokens
  // Whether rows whose segment_ids are all 0 may drop the mask for the fused kernels' plain causal path: finding
  // that out reads the segments on the host (a device sync on CUDA). false: the mask path always, without the sync
  // (a CUDA graph of the step bakes one path for every batch).
  bool allow_plain_causal = true;
};

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  explicit LlamaForCausalLMImpl(const LlamaConfig& config, const LlamaLoraOptions& lora = {});

  // logits [B, T, vocab] in float32 (Gemma 2: soft-capped after the cast, LlamaConfig::final_logit_softcapping).
  // position_ids undefined: 0..T-1 (offset by the cache length when decoding).
  torch::Tensor forward(const torch::Tensor& input_ids, AttentionInputs inputs = {});
  // Same, from input embeddings [B, T, hidden] (gradient-enabled inference differentiates with respect to them).
  torch::Tensor forward_embeddings(const torch::Tensor& input_embeddings, AttentionInputs inputs = {});
  torch::Tensor embed(const torch::Tensor& input_ids);
  // The final norm's output [B, T, hidden] (the lm_head's input), and the lm_head's weight [vocab, hidden] (the
  // embedding matrix when tied): training feeds both to train::causal_lm_linear_loss_sum, which never holds the
  // whole [B, T, vocab] logits.
  torch::Tensor forward_hidden(const torch::Tensor& input_ids, AttentionInputs inputs = {});
  torch::Tensor output_weight() const;
  // The soft cap the logits of output_weight take (0: none): what a loss computing them itself must apply.
  double output_softcap() const { return config_.final_logit_softcapping; }

  // Blocks for the memory machinery and distributed wrapping; the runner decides how each block executes.
  int64_t num_blocks() const { return config_.num_hidden_layers; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() const;
  // The blocks' type name (distributed.shard_blocks): HF's class name.
  static const char* block_type() { return "LlamaDecoderLayer"; }
  void set_block_runner(std::shared_ptr<nn::BlockRunner> runner) { runner_ = std::move(runner); }

  // LoRA: freezes every non-LoRA parameter (requires_grad false).
  void freeze_base_weights();
  bool has_lora() const { return lora_.lora.rank > 0; }
  const LlamaLoraOptions& lora_options() const { return lora_; }
  // HF-named tensors of the full model with LoRA merged into the base weights (export --merge-lora); NF4 base
  // weights dequantised (to the dtype they were quantised from) before the merge.
  std::vector<std::pair<std::string, torch::Tensor>> merged_state() const;

  const LlamaConfig& config() const { return config_; }

 private:
  // Embeddings -> decoder layers -> final norm.
  torch::Tensor hidden_states(const torch::Tensor& input_embeddings, AttentionInputs inputs);

  LlamaConfig config_;
  LlamaLoraOptions lora_;
  std::shared_ptr<nn::BlockRunner> runner_;
  // Submodules registered as "model" (embed_tokens, layers, norm) and "lm_head" (unless tied); the concrete
  // members are the implementation's choice.
  std::shared_ptr<LlamaModelImpl> model_;
  std::shared_ptr<nn::LoraLinearImpl> lm_head_;  // null when tied to model.embed_tokens
};
TORCH_MODULE(LlamaForCausalLM);

// cap * tanh(logits / cap); cap <= 0: the logits unchanged.
torch::Tensor soft_cap_logits(const torch::Tensor& logits, double cap);

}  // namespace tune::models
