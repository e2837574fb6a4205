// Reading and writing Hugging Face config.json for LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM.
#include "tune/models/llama_config.h"

#include <fmt/format.h>

#include <fstream>
#include <map>

#include "tune/core/error.h"
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
  } else if (model_type == "qwen2") {
    config.architecture = "Qwen2ForCausalLM";
    config.vocab_size = 151936;
    config.intermediate_size = 22016;
    config.max_position_embeddings = 32768;
    config.attention_bias = true;
    config.bos_token_id = 151643;
    config.eos_token_ids = {151643};
  }
  return config;
}



RopeScaling read_rope_scaling(const json& value, const std::string& source, const std::string& field) {
  RopeScaling scaling;
  if (value.is_null()) return scaling;
  if (!value.is_object()) {
    throw InputError(fmt::format("{}: field '{}' must be null or an object, got {}", source, field, value.dump()));
  }
  const io::JsonFields reader(value, source, field + ".");
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

}  // namespace

LlamaConfig LlamaConfig::from_json(const json& config_json, const std::string& source) {
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config_json.type_name()));
  }
  const io::JsonFields reader(config_json, source);
  const std::string model_type = reader.string("model_type", "llama");
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2") {
    reader.fail("model_type", fmt::format("is '{}'; supported: llama, mistral, qwen2", model_type));
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
  // Mistral's default is 8 (kept from defaults_for).
  config.num_key_value_heads = reader.positive(
      "num_key_value_heads", model_type == "mistral" ? config.num_key_value_heads : config.num_attention_heads);
  config.head_dim = reader.has("head_dim") ? reader.positive("head_dim", 0) : 0;
  config.max_position_embeddings = reader.positive("max_position_embeddings", config.max_position_embeddings);
  config.rms_norm_eps = reader.real("rms_norm_eps", config.rms_norm_eps);
  config.rope_theta = reader.real("rope_theta", config.rope_theta);
  if (config_json.contains("rope_scaling")) {
    config.rope_scaling = read_rope_scaling(config_json.at("rope_scaling"), source, "rope_scaling");
  }
  // transformers >= 5 nests theta and scaling in "rope_parameters".
  if (reader.has("rope_parameters")) {
    const json& parameters = config_json.at("rope_parameters");
    config.rope_scaling = read_rope_scaling(parameters, source, "rope_parameters");
    if (parameters.is_object()) config.rope_theta = io::JsonFields(parameters, source, "rope_parameters.").real("rope_theta", config.rope_theta);
  }
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", config.tie_word_embeddings);
  if (model_type != "qwen2") {
    // Qwen2's q/k/v always have biases and its config has no such field.
    config.attention_bias = reader.boolean("attention_bias", config.attention_bias);
  }
  config.mlp_bias = reader.boolean("mlp_bias", config.mlp_bias);
  // Mistral's sliding window is kept for the round trip only (see LlamaConfig::sliding_window). Qwen2 applies
  // its window only when use_sliding_window is true.
  if (model_type == "mistral") {
    config.sliding_window = config_json.contains("sliding_window") ? reader.integer("sliding_window", 0) : config.sliding_window;
  } else if (model_type == "qwen2" && reader.boolean("use_sliding_window", false)) {
    config.sliding_window = reader.integer("sliding_window", 4096);
  }
  if (config.sliding_window < 0) reader.fail("sliding_window", fmt::format("must be null or positive, got {}", config.sliding_window));
  config.bos_token_id = reader.integer("bos_token_id", config.bos_token_id);
  if (reader.has("eos_token_id")) {
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
  if (model_type != "qwen2") {
    out["attention_bias"] = attention_bias;
    out["mlp_bias"] = mlp_bias;
  }
  if (model_type == "mistral") {
    // Written explicitly (null when absent): MistralConfig would otherwise default to a 4096-token window.
    out["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  } else if (model_type == "qwen2") {
    out["use_sliding_window"] = sliding_window > 0;
    out["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    out["max_window_layers"] = num_hidden_layers;
  }
  out["hidden_act"] = "silu";
  out["attention_dropout"] = 0.0;
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
