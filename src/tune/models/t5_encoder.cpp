// The T5 encoder stack and its Hugging Face loader (transformers' models/t5/modeling_t5.py: T5Stack, T5EncoderModel).
#include "tune/models/t5_encoder.h"

#include <c10/util/BFloat16.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <string>

#include "tune/core/error.h"
#include "tune/io/weights.h"

namespace tune::models {
namespace {

constexpr const char* kSharedName = "shared.weight";
constexpr const char* kEmbedTokensName = "encoder.embed_tokens.weight";

void refuse_fp16(torch::ScalarType dtype) {
  if (dtype == torch::kHalf) {
    throw UsageError("the T5 encoder cannot run in fp16: T5 v1.1's activations overflow it (transformers keeps `wo` "
                     "in fp32 and clamps; tune does not); use bf16 or fp32");
  }
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A checkpoint holding only encoder.embed_tokens.weight (its tie to shared.weight written out the other way round):
// the embedding is read from there, with load_into_module's checks.
void load_shared_from_embed_tokens(T5EncoderImpl& model, const io::WeightSource& weights) {
  const io::SafetensorsFile& file = weights.file_of(kEmbedTokensName);
  const io::TensorEntry& entry = file.entries().at(kEmbedTokensName);
  torch::Tensor& target = model.shared->weight;
  if (entry.shape != target.sizes().vec()) {
    throw InputError(fmt::format("{}: tensor '{}' (the embedding, stored without '{}') has shape [{}], the model "
                                 "expects [{}] (vocab_size, d_model)",
                                 file.path().string(), kEmbedTokensName, kSharedName, fmt::join(entry.shape, ", "),
                                 fmt::join(target.sizes(), ", ")));
  }
  if (!c10::isFloatingType(entry.dtype)) {
    throw InputError(fmt::format("{}: tensor '{}' is not floating-point", file.path().string(), kEmbedTokensName));
  }
  const torch::Tensor values = file.load(kEmbedTokensName);
  io::require_finite(values, file.path(), kEmbedTokensName);
  torch::NoGradGuard no_grad;
  target.copy_(values);
}

}  // namespace

T5EncoderStackImpl::T5EncoderStackImpl(const T5EncoderConfig& config, const torch::TensorOptions& options) {
  block = register_module("block", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) {
    // Only the first block has the bias table; the others reuse its bias (computed once per forward).
    blocks.emplace_back(config, /*has_relative_attention_bias=*/i == 0, options);
    block->push_back(blocks.back());
  }
  final_layer_norm = register_module("final_layer_norm", make_t5_layer_norm(config, options));
}

torch::Tensor T5EncoderStackImpl::forward(const torch::Tensor& embeddings, const torch::Tensor& keep) {
  const int64_t batch = embeddings.size(0), length = embeddings.size(1);
  torch::Tensor additive_mask = blocks.front()->self_attention->SelfAttention->position_bias(length);  // [1, H, L, L]
  if (keep.defined()) {
    // Padded keys at bf16's lowest value (not -inf, and representable in every dtype tune runs): their
    // probability is an exact 0, as with transformers' finfo.min.
    const double hidden_key = static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    additive_mask = torch::where(keep.view({batch, 1, 1, length}), additive_mask, hidden_key);  // [B, H, L, L]
  }
  torch::Tensor hidden = embeddings;
  for (auto& layer : blocks) hidden = layer(hidden, additive_mask);
  return final_layer_norm(hidden);
}

T5EncoderImpl::T5EncoderImpl(const T5EncoderConfig& config, const torch::TensorOptions& options, bool random_init)
    : config_(config) {
  refuse_fp16(options.dtype().toScalarType());
  // Given its (undrawn) weight, Embedding allocates nothing in the default dtype: 32128 x 4096 for T5-XXL.
  shared = register_module("shared", torch::nn::Embedding(torch::nn::EmbeddingOptions(config.vocab_size, config.d_model)
                                                              ._weight(torch::empty({config.vocab_size, config.d_model},
                                                                                    options))));
  encoder = register_module("encoder", T5EncoderStack(config, options));
  if (random_init) reset_parameters();
}

void T5EncoderImpl::reset_parameters() {
  const double d_model = static_cast<double>(config_.d_model);
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor& weight = item.value();
    if (ends_with(name, "layer_norm.weight")) {
      weight.fill_(1.0);
    } else if (name == kSharedName) {
      weight.normal_(0.0, 1.0);
    } else if (ends_with(name, ".q.weight")) {
      weight.normal_(0.0, std::pow(d_model * static_cast<double>(config_.d_kv), -0.5));
    } else if (ends_with(name, ".o.weight")) {
      weight.normal_(0.0, std::pow(static_cast<double>(config_.inner_dim()), -0.5));
    } else if (ends_with(name, ".wo.weight")) {
      weight.normal_(0.0, std::pow(static_cast<double>(config_.d_ff), -0.5));
    } else {  // k, v, wi, wi_0, wi_1, relative_attention_bias
      weight.normal_(0.0, std::pow(d_model, -0.5));
    }
  }
}

torch::Tensor T5EncoderImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  const torch::Tensor& table = shared->weight;
  refuse_fp16(table.scalar_type());  // a module converted after construction
  TORCH_CHECK(input_ids.dim() == 2 && !c10::isFloatingType(input_ids.scalar_type()),
              "T5Encoder: input_ids must be an integer tensor [batch, length], got ", input_ids.sizes(), " ",
              input_ids.scalar_type());
  TORCH_CHECK(input_ids.size(1) > 0, "T5Encoder: input_ids has no tokens");
  const torch::Tensor ids = input_ids.to(table.device(), torch::kLong);
  const int64_t lowest = ids.min().item<int64_t>(), highest = ids.max().item<int64_t>();
  if (lowest < 0 || highest >= config_.vocab_size) {
    throw InputError(fmt::format("T5 encoder: token id {} is outside its embedding (vocab_size {}); HINT: the "
                                 "tokenizer does not belong to this text encoder",
                                 lowest < 0 ? lowest : highest, config_.vocab_size));
  }
  torch::Tensor keep;
  if (attention_mask.defined()) {
    TORCH_CHECK(attention_mask.sizes() == input_ids.sizes(), "T5Encoder: attention_mask ", attention_mask.sizes(),
                " must have input_ids' shape ", input_ids.sizes());
    keep = attention_mask.to(table.device()) != 0;
  }
  return encoder(shared(ids), keep);
}

T5Encoder load_t5_encoder(const std::filesystem::path& dir, torch::ScalarType dtype, torch::Device device) {
  refuse_fp16(dtype);
  if (!c10::isFloatingType(dtype)) {
    throw UsageError(fmt::format("the T5 encoder's dtype must be fp32 or bf16, got {}", c10::toString(dtype)));
  }
  const T5EncoderConfig config = read_t5_encoder_config(dir / "config.json");
  const io::WeightSource weights = io::WeightSource::open_directory(dir);
  T5Encoder model(config, torch::TensorOptions().dtype(dtype).device(device), /*random_init=*/false);

  io::LoadOptions options;
  // A T5ForConditionalGeneration (or T5Model) file also holds the decoder and the LM head.
  options.ignore_unexpected_containing = {"decoder.", "lm_head."};
  const bool embedding_as_embed_tokens_only = !weights.contains(kSharedName) && weights.contains(kEmbedTokensName);
  options.ignore_unexpected_containing.push_back(kEmbedTokensName);  // the tie's other name
  if (embedding_as_embed_tokens_only) options.ignore_missing_containing.push_back(kSharedName);
  io::load_into_module(*model, weights, options);
  if (embedding_as_embed_tokens_only) load_shared_from_embed_tokens(*model, weights);

  model->eval();
  for (auto& parameter : model->parameters()) parameter.set_requires_grad(false);
  return model;
}

int64_t t5_encoder_parameter_count(const T5EncoderConfig& config) {
  const int64_t d = config.d_model, inner = config.inner_dim();
  const int64_t attention = 3 * d * inner + inner * d;
  const int64_t feed_forward = (config.is_gated_act ? 2 : 1) * d * config.d_ff + config.d_ff * d;
  const int64_t layer = attention + feed_forward + 2 * d;  // + the two layer norms' weights
  return config.vocab_size * d + config.num_layers * layer +
         config.relative_attention_num_buckets * config.num_heads + d;
}

}  // namespace tune::models
