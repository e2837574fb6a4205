// Gemma 2 as a text encoder (Sana's): a diffusers pipeline's text_encoder/ directory holds a Gemma2Model (config.json
// architectures ["Gemma2Model"], tensor names without the "model." prefix, no lm_head), whose final-norm hidden
// states are the caption embeddings. The decoder is tune's Llama-family model in its gemma2 variant; this loads it
// from such a directory and runs the prompt batch through it.
#pragma once

#include <torch/types.h>

#include <filesystem>

#include "tune/models/llama.h"

namespace tune::models {

class Gemma2TextEncoder {
 public:
  // `directory`: config.json (model_type gemma2) and model.safetensors or a sharded index, as save_pretrained writes
  // them for Gemma2Model (names without "model.") or Gemma2ForCausalLM (with it; lm_head.weight, if stored, unused).
  // Weights are stored in `dtype` (fp32, bf16 or fp16) on the CPU, frozen. Errors name the file and tensor (a missing
  // or misshapen weight, a config.json value tune does not implement).
  static Gemma2TextEncoder load(const std::filesystem::path& directory, torch::ScalarType dtype = torch::kFloat32);

  // input_ids [B, L] (integers below vocab_size), attention_mask [B, L] (nonzero: a real token, 0: padding, as the
  // tokenizer's padding="max_length" writes it; undefined: all real). Returns last_hidden_state [B, L, hidden] after
  // the final norm, in the weights' dtype. Positions are 0..L-1 whatever the mask, as transformers' are when it is
  // given no position_ids, so the real tokens of right-padded rows get transformers' values. A padded position attends
  // only to itself (transformers lets it see the real tokens before it): its value differs and is meant to be masked,
  // as Sana's cross-attention masks it with the same attention_mask.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  const LlamaConfig& config() const { return model_->config(); }
  LlamaForCausalLM& model() { return model_; }

 private:
  explicit Gemma2TextEncoder(LlamaForCausalLM model) : model_(std::move(model)) {}
  LlamaForCausalLM model_;
};

}  // namespace tune::models
