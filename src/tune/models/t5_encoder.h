// The T5 encoder (transformers' T5EncoderModel: T5 v1.1 is Latte-1's and PixArt's text encoder) and its loader
// from a Hugging Face model directory. named_parameters() are transformers' names: shared.weight,
// encoder.block.{i}.layer.0.SelfAttention.{q,k,v,o}.weight, encoder.block.0.layer.0.SelfAttention.
// relative_attention_bias.weight, encoder.block.{i}.layer.{0,1}.layer_norm.weight,
// encoder.block.{i}.layer.1.DenseReluDense.{wi_0,wi_1,wo}.weight (wi when not gated), encoder.final_layer_norm.weight.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <filesystem>
#include <vector>

#include "tune/models/t5_config.h"
#include "tune/models/t5_layers.h"
#include "tune/nn/rms_norm.h"

namespace tune::models {

// transformers' T5Stack as an encoder, without its embed_tokens (tied to T5EncoderImpl::shared, which a checkpoint
// may also store as encoder.embed_tokens.weight: the loader maps it, so the module has one parameter for both).
class T5EncoderStackImpl : public torch::nn::Module {
 public:
  T5EncoderStackImpl(const T5EncoderConfig& config, const torch::TensorOptions& options);
  // embeddings [B, L, d_model]; keep [B, L] bool (false: a padding key no query attends to) or undefined.
  torch::Tensor forward(const torch::Tensor& embeddings, const torch::Tensor& keep);

  torch::nn::ModuleList block{nullptr};
  std::vector<T5Block> blocks;  // block's entries, typed
  nn::RMSNorm final_layer_norm{nullptr};
};
TORCH_MODULE(T5EncoderStack);

class T5EncoderImpl : public torch::nn::Module {
 public:
  // Parameters in `options`' dtype and device (fp32 or bf16; fp16 is refused with tune::UsageError: T5 v1.1's
  // activations overflow it, which transformers patches with an fp32 `wo` and clamps that tune does not copy).
  // random_init: transformers' T5 initialisation from LibTorch's default generator; false leaves the weights
  // undrawn (allocated, uninitialised) for a loader to fill.
  explicit T5EncoderImpl(const T5EncoderConfig& config, const torch::TensorOptions& options = {},
                         bool random_init = true);

  // input_ids [B, L] (any integer dtype, moved to the parameters' device); attention_mask [B, L] (0/1 integers,
  // bool or floats; nonzero = a real token) or undefined (all real). Returns last_hidden_state [B, L, d_model] in
  // the parameters' dtype; padded positions get values too (they attend to the real tokens) that callers mask.
  // An id outside the embedding (vocab_size) throws tune::InputError: a tokenizer that does not belong to the model.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  // transformers' T5PreTrainedModel._init_weights (initializer_factor 1): normal with std 1 for the embedding,
  // (d_model * d_kv)^-0.5 for q, d_model^-0.5 for k, v, wi, wi_0, wi_1 and the bias table, (heads * d_kv)^-0.5
  // for o, d_ff^-0.5 for wo; ones for the norms.
  void reset_parameters();

  const T5EncoderConfig& config() const { return config_; }

  torch::nn::Embedding shared{nullptr};
  T5EncoderStack encoder{nullptr};

 private:
  T5EncoderConfig config_;
};
TORCH_MODULE(T5Encoder);

// Loads a Hugging Face T5 encoder directory: `dir`/config.json (read_t5_encoder_config) and model.safetensors, or
// the shards listed in model.safetensors.index.json. The module is built in `dtype` on `device` and the file's
// tensors are converted into it one at a time, so a bf16 T5-XXL never exists in fp32. The embedding may be stored
// as shared.weight, encoder.embed_tokens.weight or both (tied: shared.weight wins); a T5ForConditionalGeneration
// file's decoder.* and lm_head.weight tensors are skipped. Returns the encoder in eval mode with every parameter
// frozen (requires_grad false): tune never trains the text encoder. Errors name the file and tensor
// (tune::InputError: missing, misshapen or non-finite tensors, unexpected ones); fp16 throws tune::UsageError.
T5Encoder load_t5_encoder(const std::filesystem::path& dir, torch::ScalarType dtype, torch::Device device);

// The parameters T5EncoderImpl holds for `config` (the shared embedding, each layer's attention, gated or plain
// feed-forward and two norms, the first layer's relative position bias, the final norm), counted without building
// it: what a memory plan needs of T5-XXL's 4.76B.
int64_t t5_encoder_parameter_count(const T5EncoderConfig& config);

}  // namespace tune::models
