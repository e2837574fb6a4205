// Loading a Gemma2Model (or Gemma2ForCausalLM) directory as a frozen text encoder, and its masked forward.
#include "tune/models/gemma2_text_encoder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tune/core/error.h"
#include "tune/io/weights.h"

namespace tune::models {
namespace {

// The trunk registered as "model" (embed_tokens, layers, norm): what a Gemma2Model file names without a prefix.
torch::nn::Module& trunk_of(LlamaForCausalLMImpl& model) {
  for (const auto& child : model.named_children()) {
    if (child.key() == "model") return *child.value();
  }
  throw std::logic_error("LlamaForCausalLM has no 'model' submodule");
}

}  // namespace

Gemma2TextEncoder Gemma2TextEncoder::load(const std::filesystem::path& directory, torch::ScalarType dtype) {
  const auto config_file = directory / "config.json";
  LlamaConfig config = LlamaConfig::from_file(config_file.string());
  if (!config.is_gemma2()) {
    throw InputError(fmt::format("{}: model_type is '{}'; the text encoder reads gemma2 (Gemma2Model) directories",
                                 config_file.string(), config.model_type));
  }
  // The encoder needs no LM head: built tied, so there is none to fill whatever the file's tie_word_embeddings.
  config.tie_word_embeddings = true;
  LlamaLoraOptions frozen;
  frozen.all_frozen = true;
  frozen.base_dtype = dtype;
  LlamaForCausalLM model(config, frozen);
  for (auto& parameter : model->parameters()) parameter.set_requires_grad(false);

  const io::WeightSource source = io::WeightSource::open_directory(directory);
  io::LoadOptions options;
  options.ignore_unexpected_containing = {"rotary_emb.inv_freq", "lm_head.weight"};
  // Gemma2ForCausalLM names its tensors "model.…"; Gemma2Model (a pipeline's text_encoder/) the same without it.
  const bool prefixed = source.contains("model.embed_tokens.weight");
  if (prefixed) {
    io::load_into_module(*model, source, options);
  } else {
    io::load_into_module(trunk_of(*model), source, options);
  }
  model->eval();
  return Gemma2TextEncoder(std::move(model));
}

torch::Tensor Gemma2TextEncoder::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  if (input_ids.dim() != 2) {
    throw std::invalid_argument(fmt::format("Gemma2TextEncoder: input_ids must be [batch, length], got {}",
                                            fmt::join(input_ids.sizes(), "x")));
  }
  const int64_t vocab = config().vocab_size;
  if (input_ids.numel() > 0 && (input_ids.min().item<int64_t>() < 0 || input_ids.max().item<int64_t>() >= vocab)) {
    throw InputError(fmt::format("Gemma2TextEncoder: token ids must lie in [0, {}) (vocab_size), got [{}, {}]; is the "
                                 "tokenizer the model's?", vocab, input_ids.min().item<int64_t>(),
                                 input_ids.max().item<int64_t>()));
  }
  AttentionInputs inputs;
  if (attention_mask.defined()) {
    if (attention_mask.sizes() != input_ids.sizes()) {
      throw std::invalid_argument(fmt::format("Gemma2TextEncoder: attention_mask must be [{}], got [{}]",
                                              fmt::join(input_ids.sizes(), ", "),
                                              fmt::join(attention_mask.sizes(), ", ")));
    }
    // Padding as a segment of its own (-1): real tokens never attend to it (nn/attention_mask.h).
    inputs.segment_ids = torch::where(attention_mask.ne(0), 0, -1).to(torch::kInt64);
  }
  return model_->forward_hidden(input_ids.to(torch::kInt64), inputs);
}

}  // namespace tune::models
