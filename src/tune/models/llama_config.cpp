// Reading and writing Hugging Face config.json for LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, Gemma2ForCausalLM and Gemma2Model (transformers 5's configuration_*.py and modeling_*.py are the reference for every default and
// for which fields each class reads).
#include "tune/models/llama_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "tune/core/error.h"
#include "tune/io/bnb_4bit.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::models {
namespace {

using nlohmann::json;

// HF's defaults where config.json leaves a field out differ by model_type (e.g. Qwen2 always has q/k/v biases).
LlamaConfig defaults_for(const std::string& model_type) {
  LlamaConfig config;
  config.model_type = model_type;
  if (model_type == "mistral") {
    config.architecture = "MistralForCausalLM";
    config.intermediate_size = 14336;
    config.num_key_value_heads = 8;
    config.max_position_embeddings = 4096 * 32;
    config.sliding_window = 4096;
  } else if (model_type == "qwen2" || model_type == "qwen3") {
    config.architecture = model_type == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
    config.vocab_size = 151936;
    config.intermediate_size = 22016;
    config.max_position_embeddings = 32768;
    config.attention_bias = model_type == "qwen2";
    config.max_window_layers = 28;
    if (model_type == "qwen3") config.head_dim = 128;  // Qwen3Config's own default, not hidden / heads
    config.bos_token_id = 151643;
    config.eos_token_ids = {151643};
  } else if (model_type == "gemma2") {
    // Gemma2Config's defaults (gemma-2-2b).
    config.architecture = "Gemma2ForCausalLM";
    config.vocab_size = 256000;
    config.hidden_size = 2304;
    config.intermediate_size = 9216;
    config.num_hidden_layers = 26;
    config.num_attention_heads = 8;
    config.num_key_value_heads = 4;
    config.head_dim = 256;
    config.max_position_embeddings = 8192;
    config.tie_word_embeddings = true;
    config.hidden_act = "gelu_pytorch_tanh";
    config.sliding_window = 4096;
    config.query_pre_attn_scalar = 256;
    config.attn_logit_softcapping = 50.0;
    config.final_logit_softcapping = 30.0;
    config.bos_token_id = 2;
    config.eos_token_ids = {1};
    config.pad_token_id = 0;
  }
  return config;
}

// The keys a RoPE dict may hold: those of the "default" and "llama3" types, which are all tune implements. Any other
// key belongs to a RoPE variant tune would silently run as plain RoPE.
const std::set<std::string> kRopeKeys = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                         "high_freq_factor", "original_max_position_embeddings",
                                         "partial_rotary_factor"};

// partial_rotary_factor (top level or in the RoPE dict): RoPE on only a leading fraction of each head.
void check_partial_rotary_factor(const io::JsonFields& reader) {
  const double factor = reader.real("partial_rotary_factor", 1.0);
  if (factor != 1.0) {
    reader.fail("partial_rotary_factor", fmt::format("is {}; tune applies RoPE to the whole head (only 1.0 is "
                                                     "supported)", factor));
  }
}

RopeScaling read_rope_scaling(const json& value, const std::string& source, const std::string& field) {
  RopeScaling scaling;
  if (value.is_null()) return scaling;
  if (!value.is_object()) {
    throw InputError(fmt::format("{}: field '{}' must be null or an object, got {}", source, field, value.dump()));
  }
  const io::JsonFields reader(value, source, field + ".");
  for (const auto& item : value.items()) {
    if (item.key() == "full_attention" || item.key() == "sliding_attention") {
      reader.fail(item.key(), "holds RoPE parameters per layer type, which tune does not implement (one set for all "
                              "layers only)");
    }
    if (kRopeKeys.count(item.key()) == 0) {
      reader.fail(item.key(), fmt::format("is not a parameter of the RoPE types tune implements (\"default\", "
                                          "\"llama3\"), so tune would compute a different RoPE than the model's; "
                                          "known keys: {}", fmt::join(kRopeKeys, ", ")));
    }
  }
  check_partial_rotary_factor(reader);
  // "type" is the pre-4.45 spelling of "rope_type".
  std::string type = reader.has("rope_type") ? reader.string("rope_type", "default") : reader.string("type", "default");
  if (type == "default") return scaling;
  if (type != "llama3") {
    reader.fail(reader.has("rope_type") ? "rope_type" : "type",
                fmt::format("is '{}', which tune does not implement (supported: \"default\", \"llama3\"); "
                            "HINT: use a checkpoint without this RoPE scaling or convert it", type));
  }
  scaling.rope_type = type;
  for (const char* required : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (!reader.has(required)) reader.fail(required, "is required for rope_type \"llama3\"");
  }
  scaling.factor = reader.real("factor", scaling.factor);
  scaling.low_freq_factor = reader.real("low_freq_factor", scaling.low_freq_factor);
  scaling.high_freq_factor = reader.real("high_freq_factor", scaling.high_freq_factor);
  scaling.original_max_position_embeddings =
      reader.positive("original_max_position_embeddings", scaling.original_max_position_embeddings);
  if (scaling.factor <= 0) reader.fail("factor", fmt::format("must be positive, got {}", scaling.factor));
  if (scaling.low_freq_factor <= 0 || scaling.high_freq_factor <= scaling.low_freq_factor) {
    reader.fail("high_freq_factor", fmt::format("must exceed low_freq_factor ({}) > 0, got {}",
                                                scaling.low_freq_factor, scaling.high_freq_factor));
  }
  return scaling;
}

// RoPE: transformers takes a non-empty "rope_scaling" (< 5) over "rope_parameters" (>= 5, which also nests
// rope_theta); a rope_theta inside the chosen dict wins over the top-level one.
void read_rope(const io::JsonFields& reader, const json& config_json, const std::string& source, LlamaConfig& config) {
  check_partial_rotary_factor(reader);
  config.rope_theta = reader.real("rope_theta", config.rope_theta);
  const bool scaling_given = reader.has("rope_scaling") && !config_json.at("rope_scaling").empty();
  const char* field = scaling_given ? "rope_scaling" : reader.has("rope_parameters") ? "rope_parameters" : nullptr;
  if (field == nullptr) return;
  const json& parameters = config_json.at(field);
  config.rope_scaling = read_rope_scaling(parameters, source, field);
  if (parameters.is_object()) {
    config.rope_theta = io::JsonFields(parameters, source, std::string(field) + ".").real("rope_theta", config.rope_theta);
  }
}

// Settings of the four classes that change the maths and that tune does not implement: refused, never ignored.
void check_unimplemented(const io::JsonFields& reader, const json& config_json, const std::string& source,
                         LlamaConfig& config) {
  // Gemma2's MLP reads hidden_activation (a hidden_act beside it, as older Gemma files have, is ignored by
  // transformers and so by tune).
  const char* activation_key = config.is_gemma2() ? "hidden_activation" : "hidden_act";
  config.hidden_act = reader.string(activation_key, config.hidden_act);
  if (std::find(kSupportedHiddenActs.begin(), kSupportedHiddenActs.end(), config.hidden_act) == kSupportedHiddenActs.end()) {
    reader.fail(activation_key, fmt::format("is '{}', an activation tune's MLP does not implement (supported: {})",
                                            config.hidden_act, fmt::join(kSupportedHiddenActs, ", ")));
  }
  // Dropout on the attention probabilities, which HF applies in training only. Refused rather than implemented:
  // released checkpoints have 0.0, and fine-tuning would otherwise differ from HF's training.
  const double attention_dropout = reader.real("attention_dropout", 0.0);
  if (attention_dropout != 0.0) {
    reader.fail("attention_dropout", fmt::format("is {}; tune does not implement attention dropout (only 0.0); "
                                                 "HINT: set it to 0.0 in config.json to train without it",
                                                 attention_dropout));
  }
  // A bitsandbytes 4-bit NF4 checkpoint loads as published (its weights are read as NF4, recipes/sft/sft_model.cpp);
  // any other quantisation (8-bit, FP4, GPTQ, AWQ, ...) is refused by name, here, before a tensor is read.
  if (reader.has("quantization_config")) {
    io::parse_bnb_quantization_config(config_json.at("quantization_config"), source);
  }
  // pretraining_tp (Llama): transformers < 4.47 split the projections into that many slices and summed the partial
  // products, mathematically the same matmul (only rounding differs); transformers 5 ignores it, and so does tune.
}

// A layer_types list: one known type per layer, and a window wherever a layer slides (transformers raises too).
void check_layer_types(const io::JsonFields& reader, const LlamaConfig& config, const char* no_window_reason) {
  if (static_cast<int64_t>(config.layer_types.size()) != config.num_hidden_layers) {
    reader.fail("layer_types", fmt::format("has {} entries for {} layers (num_hidden_layers)", config.layer_types.size(),
                                           config.num_hidden_layers));
  }
  for (size_t i = 0; i < config.layer_types.size(); ++i) {
    const std::string& type = config.layer_types[i];
    if (type != kFullAttention && type != kSlidingAttention) {
      reader.fail("layer_types", fmt::format("has '{}' for layer {}; supported: {}, {}", type, i, kFullAttention,
                                             kSlidingAttention));
    }
    if (type == kSlidingAttention && config.sliding_window == 0) {
      reader.fail("layer_types", fmt::format("marks layer {} {}, but there is no window ({})", i, kSlidingAttention,
                                             no_window_reason));
    }
  }
}

// Mistral: a non-null sliding_window applies to every layer (absent: MistralConfig's 4096). MistralForCausalLM
// ignores layer_types (transformers warns and points to Ministral), so one that asks for something else is refused.
void read_mistral_window(const io::JsonFields& reader, const json& config_json, LlamaConfig& config) {
  if (config_json.contains("sliding_window")) {
    config.sliding_window = reader.has("sliding_window") ? reader.positive("sliding_window", 0) : 0;
  }
  if (!reader.has("layer_types")) return;
  const std::string wanted(config.sliding_window > 0 ? kSlidingAttention : kFullAttention);
  for (const auto& type : reader.string_list("layer_types", {})) {
    if (type != wanted) {
      reader.fail("layer_types", fmt::format("has '{}', but MistralForCausalLM ignores layer_types and gives every "
                                             "layer {} (sliding_window {}); HINT: make them all '{}' or remove them",
                                             type, wanted, config.sliding_window, wanted));
    }
  }
}

// Qwen2/Qwen3 (their configuration_*.py __post_init__): the window exists only with use_sliding_window (a null
// sliding_window then means none); layer_types, when absent, marks the layers from max_window_layers on as sliding.
void read_qwen_window(const io::JsonFields& reader, const json& config_json, LlamaConfig& config) {
  int64_t window = 0;
  if (reader.boolean("use_sliding_window", false)) {
    window = config_json.contains("sliding_window") ? (reader.has("sliding_window") ? reader.positive("sliding_window", 0) : 0)
                                                    : 4096;
  }
  config.sliding_window = window;
  config.max_window_layers = reader.integer("max_window_layers", config.max_window_layers);
  if (config.max_window_layers < 0) {
    reader.fail("max_window_layers", fmt::format("must be >= 0, got {}", config.max_window_layers));
  }
  config.layer_types.clear();
  if (!reader.has("layer_types")) {
    for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
      config.layer_types.emplace_back(window > 0 && i >= config.max_window_layers ? kSlidingAttention : kFullAttention);
    }
    return;
  }
  config.layer_types = reader.string_list("layer_types", {});
  // transformers raises on a sliding layer without a window too (create_sliding_window_causal_mask needs one).
  check_layer_types(reader, config, "use_sliding_window false or sliding_window null");
}

// Gemma2 (configuration_gemma2.py, modeling_gemma2.py): the sliding-window, scaling and soft-capping fields. The
// window applies on the layers layer_types marks sliding; without layer_types, Gemma2Config marks the even layers
// (i + 1 odd) sliding. A null soft cap means none.
void read_gemma2_fields(const io::JsonFields& reader, const json& config_json, LlamaConfig& config) {
  if (config_json.contains("sliding_window")) {
    config.sliding_window = reader.has("sliding_window") ? reader.positive("sliding_window", 0) : 0;
  }
  config.layer_types.clear();
  if (reader.has("layer_types")) {
    config.layer_types = reader.string_list("layer_types", {});
  } else {
    for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
      config.layer_types.emplace_back((i + 1) % 2 != 0 ? kSlidingAttention : kFullAttention);
    }
  }
  check_layer_types(reader, config, "sliding_window is null");
  config.query_pre_attn_scalar = reader.positive("query_pre_attn_scalar", config.query_pre_attn_scalar);
  auto read_cap = [&](const char* key, double& cap) {
    if (config_json.contains(key)) cap = reader.has(key) ? reader.real(key, 0.0) : 0.0;  // null: no cap
    if (cap < 0) reader.fail(key, fmt::format("must be positive or null (no cap), got {}", cap));
  };
  read_cap("attn_logit_softcapping", config.attn_logit_softcapping);
  read_cap("final_logit_softcapping", config.final_logit_softcapping);
  // Bidirectional attention turns the causal mask off (an encoder use of the weights) that tune's decoder keeps.
  if (reader.boolean("use_bidirectional_attention", false)) {
    reader.fail("use_bidirectional_attention", "is true; tune implements Gemma 2's causal attention only (false or "
                                               "null)");
  }
  if (config_json.contains("pad_token_id")) {
    config.pad_token_id = reader.has("pad_token_id") ? reader.integer("pad_token_id", 0) : -1;
  }
  // A task head (sequence or token classification) would be silently dropped: only the LM and the bare decoder.
  if (config.architecture != "Gemma2ForCausalLM" && config.architecture != "Gemma2Model") {
    reader.fail("architectures", fmt::format("is '{}'; tune reads Gemma2ForCausalLM and Gemma2Model",
                                             config.architecture));
  }
}

void read_eos(const io::JsonFields& reader, const json& config_json, LlamaConfig& config) {
  if (!reader.has("eos_token_id")) return;
  const json& eos = config_json.at("eos_token_id");
  config.eos_token_ids.clear();
  if (eos.is_number_integer()) {
    config.eos_token_ids.push_back(eos.get<int64_t>());
  } else if (eos.is_array()) {
    for (const json& id : eos) {
      if (!id.is_number_integer()) reader.fail("eos_token_id", fmt::format("must be an integer or a list of integers, got {}", eos.dump()));
      config.eos_token_ids.push_back(id.get<int64_t>());
    }
  } else {
    reader.fail("eos_token_id", fmt::format("must be an integer or a list of integers, got {}", eos.dump()));
  }
}

}  // namespace

double LlamaConfig::embedding_multiplier() const {
  return is_gemma2() ? std::sqrt(static_cast<double>(hidden_size)) : 1.0;
}

double LlamaConfig::attention_scale() const {
  const int64_t scalar = query_pre_attn_scalar > 0 ? query_pre_attn_scalar : resolved_head_dim();
  return 1.0 / std::sqrt(static_cast<double>(scalar));
}

int64_t LlamaConfig::layer_sliding_window(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (layer_types.empty()) return sliding_window;
  return layer_types.at(static_cast<size_t>(layer)) == kSlidingAttention ? sliding_window : 0;
}

LlamaConfig LlamaConfig::from_json(const json& config_json, const std::string& source) {
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config_json.type_name()));
  }
  const io::JsonFields reader(config_json, source);
  const std::string model_type = reader.string("model_type", "llama");
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2" && model_type != "qwen3" &&
      model_type != "gemma2") {
    reader.fail("model_type", fmt::format("is '{}'; supported: llama, mistral, qwen2, qwen3, gemma2", model_type));
  }
  LlamaConfig config = defaults_for(model_type);

  if (reader.has("architectures")) {
    const json& architectures = config_json.at("architectures");
    if (!architectures.is_array() || architectures.empty() || !architectures[0].is_string()) {
      reader.fail("architectures", fmt::format("must be a non-empty list of strings, got {}", architectures.dump()));
    }
    config.architecture = architectures[0].get<std::string>();
  }
  config.vocab_size = reader.positive("vocab_size", config.vocab_size);
  config.hidden_size = reader.positive("hidden_size", config.hidden_size);
  config.intermediate_size = reader.positive("intermediate_size", config.intermediate_size);
  config.num_hidden_layers = reader.positive("num_hidden_layers", config.num_hidden_layers);
  config.num_attention_heads = reader.positive("num_attention_heads", config.num_attention_heads);
  // Llama's rule: an absent num_key_value_heads means multi-head attention (as many kv heads as heads);
  // Mistral's default is 8 and Gemma2's 4 (kept from defaults_for). An explicit null is multi-head attention for
  // every class.
  const bool kv_heads_absent = !config_json.contains("num_key_value_heads");
  const bool own_kv_default = (model_type == "mistral" || model_type == "gemma2") && kv_heads_absent;
  config.num_key_value_heads =
      reader.positive("num_key_value_heads", own_kv_default ? config.num_key_value_heads : config.num_attention_heads);
  config.head_dim = reader.has("head_dim") ? reader.positive("head_dim", 0) : config.head_dim;
  config.max_position_embeddings = reader.positive("max_position_embeddings", config.max_position_embeddings);
  config.rms_norm_eps = reader.real("rms_norm_eps", config.rms_norm_eps);
  read_rope(reader, config_json, source, config);
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", config.tie_word_embeddings);
  // Which biases each class reads: Llama both flags; Qwen3 attention_bias (on all four projections); Qwen2's
  // q/k/v always have biases and Mistral never has any, whatever config.json says (their classes ignore the
  // fields, so tune does as well); the MLPs of Mistral and Qwen have none.
  if (model_type == "llama" || model_type == "qwen3" || model_type == "gemma2") {
    config.attention_bias = reader.boolean("attention_bias", config.attention_bias);
  }
  if (model_type == "llama") config.mlp_bias = reader.boolean("mlp_bias", config.mlp_bias);
  check_unimplemented(reader, config_json, source, config);
  // Sliding windows: LlamaForCausalLM has none (it ignores any such field, so tune does too).
  if (model_type == "mistral") {
    read_mistral_window(reader, config_json, config);
  } else if (model_type == "qwen2" || model_type == "qwen3") {
    read_qwen_window(reader, config_json, config);
  } else if (model_type == "gemma2") {
    read_gemma2_fields(reader, config_json, config);
  }
  config.bos_token_id = reader.integer("bos_token_id", config.bos_token_id);
  read_eos(reader, config_json, config);
  // transformers >= 4.56 writes "dtype" instead of "torch_dtype".
  config.torch_dtype = reader.has("torch_dtype") ? reader.string("torch_dtype", config.torch_dtype)
                                                 : reader.string("dtype", config.torch_dtype);

  if (config.head_dim == 0 && config.hidden_size % config.num_attention_heads != 0) {
    reader.fail("num_attention_heads", fmt::format("({}) must divide hidden_size ({}) when head_dim is not given",
                                                   config.num_attention_heads, config.hidden_size));
  }
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    reader.fail("num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})",
                                                   config.num_key_value_heads, config.num_attention_heads));
  }
  if (config.resolved_head_dim() % 2 != 0) {
    reader.fail(config.head_dim > 0 ? "head_dim" : "hidden_size",
                fmt::format("gives an odd head dimension ({}); rotary embeddings need an even one", config.resolved_head_dim()));
  }
  if (config.rms_norm_eps <= 0) reader.fail("rms_norm_eps", fmt::format("must be positive, got {}", config.rms_norm_eps));
  if (config.rope_theta <= 0) reader.fail("rope_theta", fmt::format("must be positive, got {}", config.rope_theta));
  // Stored resolved, as to_json writes it, so that from_json(to_json()) equals the config.
  config.head_dim = config.resolved_head_dim();
  return config;
}

LlamaConfig LlamaConfig::from_file(const std::string& config_json_path) {
  return from_json(io::read_json_file(config_json_path, "the model's config.json"), config_json_path);
}

json LlamaConfig::to_json() const {
  json out;
  out["architectures"] = json::array({architecture});
  out["model_type"] = model_type;
  out["vocab_size"] = vocab_size;
  out["hidden_size"] = hidden_size;
  out["intermediate_size"] = intermediate_size;
  out["num_hidden_layers"] = num_hidden_layers;
  out["num_attention_heads"] = num_attention_heads;
  out["num_key_value_heads"] = num_key_value_heads;
  out["head_dim"] = resolved_head_dim();
  out["max_position_embeddings"] = max_position_embeddings;
  out["rms_norm_eps"] = rms_norm_eps;
  out["rope_theta"] = rope_theta;
  if (rope_scaling.rope_type == "default") {
    out["rope_scaling"] = nullptr;
  } else {
    out["rope_scaling"] = {{"rope_type", rope_scaling.rope_type},
                           {"factor", rope_scaling.factor},
                           {"low_freq_factor", rope_scaling.low_freq_factor},
                           {"high_freq_factor", rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  }
  out["tie_word_embeddings"] = tie_word_embeddings;
  // Only the fields the model_type's class reads (from_json's rules).
  if (model_type == "llama" || model_type == "qwen3" || model_type == "gemma2") out["attention_bias"] = attention_bias;
  if (model_type == "llama") out["mlp_bias"] = mlp_bias;
  if (model_type == "mistral") {
    // Written explicitly (null when absent): MistralConfig would otherwise default to a 4096-token window.
    out["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  }
  json types = json::array();
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    types.push_back(std::string(layer_sliding_window(i) > 0 ? kSlidingAttention : kFullAttention));
  }
  if (model_type == "qwen2" || model_type == "qwen3") {
    out["use_sliding_window"] = sliding_window > 0;
    out["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    out["max_window_layers"] = max_window_layers;
    out["layer_types"] = types;
  } else if (is_gemma2()) {
    out["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    out["layer_types"] = types;
    out["query_pre_attn_scalar"] = query_pre_attn_scalar;
    out["attn_logit_softcapping"] = attn_logit_softcapping > 0 ? json(attn_logit_softcapping) : json(nullptr);
    out["final_logit_softcapping"] = final_logit_softcapping > 0 ? json(final_logit_softcapping) : json(nullptr);
    out["pad_token_id"] = pad_token_id >= 0 ? json(pad_token_id) : json(nullptr);
  }
  out[is_gemma2() ? "hidden_activation" : "hidden_act"] = hidden_act;
  out["attention_dropout"] = 0.0;  // the only value from_json accepts
  out["initializer_range"] = 0.02;
  out["use_cache"] = true;
  out["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) {
    out["eos_token_id"] = eos_token_ids[0];
  } else {
    out["eos_token_id"] = eos_token_ids;
  }
  out["torch_dtype"] = torch_dtype;
  return out;
}

}  // namespace tune::models
