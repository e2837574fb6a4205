// LlamaConfig: reading HF config.json (defaults per model_type, eos forms, rope_scaling forms), writing it back,
// and the errors for unsupported or inconsistent settings.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>
#include <vector>

#include "tune/core/error.h"
#include "tune/models/llama_config.h"

using tune::models::LlamaConfig;
using json = nlohmann::json;

namespace {

json tiny_llama() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": null,
    "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"})");
}

// The error message of from_json, or "" if it did not throw InputError.
std::string error_of(const json& config) {
  try {
    LlamaConfig::from_json(config, "models/x/config.json");
  } catch (const tune::InputError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("LlamaConfig reads the fixture config.json files", "[models][config]") {
  const std::string root = std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/llama/";
  const auto llama = LlamaConfig::from_file(root + "llama/config.json");
  CHECK(llama.model_type == "llama");
  CHECK(llama.architecture == "LlamaForCausalLM");
  CHECK(llama.num_key_value_heads == 2);
  CHECK(llama.resolved_head_dim() == 8);
  CHECK(llama.rms_norm_eps == 1e-5);
  CHECK(llama.rope_scaling.rope_type == "default");
  CHECK_FALSE(llama.attention_bias);

  const auto llama3 = LlamaConfig::from_file(root + "llama3_tied/config.json");
  CHECK(llama3.tie_word_embeddings);
  CHECK(llama3.rope_scaling.rope_type == "llama3");
  CHECK(llama3.rope_scaling.factor == 8.0);
  CHECK(llama3.rope_scaling.original_max_position_embeddings == 64);
  CHECK(llama3.eos_token_ids == std::vector<int64_t>{2, 3});

  const auto qwen = LlamaConfig::from_file(root + "qwen2/config.json");
  CHECK(qwen.model_type == "qwen2");
  CHECK(qwen.attention_bias);  // Qwen2 has no such field: q/k/v biases are implied
  CHECK(qwen.rope_theta == 1e6);
  CHECK(qwen.eos_token_ids == std::vector<int64_t>{1});
  CHECK(qwen.sliding_window == 0);
}

TEST_CASE("LlamaConfig defaults follow the model_type", "[models][config]") {
  auto config = tiny_llama();
  config.erase("num_key_value_heads");
  CHECK(LlamaConfig::from_json(config, "c").num_key_value_heads == 4);  // llama: multi-head attention

  const auto mistral = LlamaConfig::from_json(json{{"model_type", "mistral"}}, "c");
  CHECK(mistral.architecture == "MistralForCausalLM");
  CHECK(mistral.num_key_value_heads == 8);
  CHECK(mistral.intermediate_size == 14336);
  CHECK(mistral.sliding_window == 4096);
  auto mistral_no_window = json{{"model_type", "mistral"}, {"sliding_window", nullptr}};
  CHECK(LlamaConfig::from_json(mistral_no_window, "c").sliding_window == 0);

  const auto qwen = LlamaConfig::from_json(json{{"model_type", "qwen2"}}, "c");
  CHECK(qwen.attention_bias);
  CHECK(qwen.vocab_size == 151936);
}

TEST_CASE("LlamaConfig accepts legacy and new rope_scaling spellings", "[models][config]") {
  auto config = tiny_llama();
  config["rope_scaling"] = {{"type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto parsed = LlamaConfig::from_json(config, "c");
  CHECK(parsed.rope_scaling.rope_type == "llama3");
  CHECK(parsed.rope_scaling.factor == 32.0);

  config["rope_scaling"] = {{"rope_type", "default"}};
  CHECK(LlamaConfig::from_json(config, "c").rope_scaling.rope_type == "default");

  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  CHECK(LlamaConfig::from_json(config, "c").rope_theta == 500000.0);
}

TEST_CASE("LlamaConfig to_json round-trips and writes what HF needs", "[models][config]") {
  for (const char* name : {"llama", "llama3_tied", "qwen2"}) {
    INFO(name);
    const auto original = LlamaConfig::from_file(std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/llama/" + name + "/config.json");
    const json written = original.to_json();
    CHECK(written.at("architectures") == json::array({original.architecture}));
    CHECK(written.at("model_type") == original.model_type);
    CHECK(written.at("hidden_act") == "silu");
    const auto again = LlamaConfig::from_json(written, "written");
    CHECK(again.to_json() == written);
    CHECK(again.architecture == original.architecture);
    CHECK(again.vocab_size == original.vocab_size);
    CHECK(again.num_key_value_heads == original.num_key_value_heads);
    CHECK(again.resolved_head_dim() == original.resolved_head_dim());
    CHECK(again.rope_theta == original.rope_theta);
    CHECK(again.rms_norm_eps == original.rms_norm_eps);
    CHECK(again.rope_scaling.rope_type == original.rope_scaling.rope_type);
    CHECK(again.rope_scaling.factor == original.rope_scaling.factor);
    CHECK(again.rope_scaling.original_max_position_embeddings == original.rope_scaling.original_max_position_embeddings);
    CHECK(again.tie_word_embeddings == original.tie_word_embeddings);
    CHECK(again.attention_bias == original.attention_bias);
    CHECK(again.eos_token_ids == original.eos_token_ids);
  }
  auto mistral = LlamaConfig::from_json(json{{"model_type", "mistral"}, {"sliding_window", nullptr}}, "c").to_json();
  CHECK(mistral.at("sliding_window").is_null());  // explicit null: MistralConfig's default would be 4096
  const auto llama3 = LlamaConfig::from_file(std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/llama/llama3_tied/config.json").to_json();
  CHECK(llama3.at("eos_token_id") == json::array({2, 3}));
  CHECK(llama3.at("rope_scaling").at("rope_type") == "llama3");
}

TEST_CASE("LlamaConfig rejects unsupported and inconsistent settings, naming file and field", "[models][config]") {
  auto config = tiny_llama();
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  auto message = error_of(config);
  CHECK_THAT(message, Catch::Contains("models/x/config.json") && Catch::Contains("rope_scaling.rope_type") &&
                          Catch::Contains("yarn"));

  config = tiny_llama();
  config["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  CHECK_THAT(error_of(config), Catch::Contains("rope_scaling.type") && Catch::Contains("linear"));

  config = tiny_llama();
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  CHECK_THAT(error_of(config), Catch::Contains("low_freq_factor"));

  config = tiny_llama();
  config["num_attention_heads"] = 5;
  config["num_key_value_heads"] = 5;
  message = error_of(config);
  CHECK_THAT(message, Catch::Contains("models/x/config.json") && Catch::Contains("num_attention_heads") &&
                          Catch::Contains("(5)") && Catch::Contains("hidden_size (32)"));

  config = tiny_llama();
  config["num_key_value_heads"] = 3;
  CHECK_THAT(error_of(config), Catch::Contains("num_key_value_heads") && Catch::Contains("(3)"));

  config = tiny_llama();
  config["hidden_size"] = "32";
  CHECK_THAT(error_of(config), Catch::Contains("hidden_size") && Catch::Contains("integer"));

  config = tiny_llama();
  config["model_type"] = "gpt2";
  CHECK_THAT(error_of(config), Catch::Contains("model_type") && Catch::Contains("gpt2"));

  config = tiny_llama();
  config["eos_token_id"] = "</s>";
  CHECK_THAT(error_of(config), Catch::Contains("eos_token_id"));

  config = tiny_llama();
  config["vocab_size"] = 0;
  CHECK_THAT(error_of(config), Catch::Contains("vocab_size") && Catch::Contains("positive"));

  CHECK_THROWS_AS(LlamaConfig::from_file("/nonexistent/config.json"), tune::InputError);

  // A head_dim given explicitly need not divide the hidden size (Llama supports that).
  config = tiny_llama();
  config["num_attention_heads"] = 5;
  config["num_key_value_heads"] = 5;
  config["head_dim"] = 8;
  CHECK(error_of(config).empty());
}

namespace {

json tiny_qwen(const std::string& model_type) {
  json config = tiny_llama();
  config["model_type"] = model_type;
  config["architectures"] = json::array({model_type == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM"});
  config["num_hidden_layers"] = 3;
  return config;
}

}  // namespace

TEST_CASE("LlamaConfig reads Qwen3 with its own defaults", "[models][config]") {
  const auto defaults = LlamaConfig::from_json(json{{"model_type", "qwen3"}}, "c");
  CHECK(defaults.architecture == "Qwen3ForCausalLM");
  CHECK(defaults.head_dim == 128);  // Qwen3Config's default, not hidden_size / heads (4096 / 32)
  CHECK_FALSE(defaults.attention_bias);
  CHECK(defaults.has_qk_norm());
  CHECK(defaults.max_window_layers == 28);
  CHECK(defaults.sliding_window == 0);

  auto config = tiny_qwen("qwen3");
  config["head_dim"] = 16;
  config["attention_bias"] = true;
  const auto qwen3 = LlamaConfig::from_json(config, "c");
  CHECK(qwen3.resolved_head_dim() == 16);
  CHECK(qwen3.attention_bias);
  CHECK_FALSE(LlamaConfig::from_json(tiny_qwen("qwen2"), "c").has_qk_norm());
  CHECK_FALSE(LlamaConfig::from_json(tiny_llama(), "c").has_qk_norm());
}

TEST_CASE("LlamaConfig reads hidden_act and biases as each class does", "[models][config]") {
  auto config = tiny_llama();
  CHECK(LlamaConfig::from_json(config, "c").hidden_act == "silu");  // absent: silu
  for (const char* act : {"silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new"}) {
    config["hidden_act"] = act;
    CHECK(LlamaConfig::from_json(config, "c").hidden_act == act);
  }
  // MistralForCausalLM has no biases and Qwen2's q/k/v always have them, whatever config.json says.
  auto mistral = tiny_llama();
  mistral["model_type"] = "mistral";
  mistral["attention_bias"] = true;
  mistral["mlp_bias"] = true;
  CHECK_FALSE(LlamaConfig::from_json(mistral, "c").attention_bias);
  CHECK_FALSE(LlamaConfig::from_json(mistral, "c").mlp_bias);
  auto qwen2 = tiny_qwen("qwen2");
  qwen2["attention_bias"] = false;
  CHECK(LlamaConfig::from_json(qwen2, "c").attention_bias);
  auto llama = tiny_llama();
  llama["mlp_bias"] = true;
  CHECK(LlamaConfig::from_json(llama, "c").mlp_bias);
}

TEST_CASE("LlamaConfig resolves sliding windows per layer as transformers does", "[models][config]") {
  // Mistral: every layer, unless sliding_window is null.
  auto mistral = tiny_llama();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4;
  const auto windowed = LlamaConfig::from_json(mistral, "c");
  CHECK(windowed.layer_sliding_window(0) == 4);
  CHECK(windowed.layer_sliding_window(1) == 4);
  mistral["layer_types"] = {"sliding_attention", "sliding_attention"};  // consistent: accepted
  CHECK(LlamaConfig::from_json(mistral, "c").layer_sliding_window(1) == 4);

  // Qwen: only with use_sliding_window, and then from max_window_layers on.
  auto qwen = tiny_qwen("qwen2");
  qwen["sliding_window"] = 4;
  qwen["max_window_layers"] = 1;
  auto off = LlamaConfig::from_json(qwen, "c");
  CHECK(off.sliding_window == 0);
  CHECK(off.layer_types == std::vector<std::string>{"full_attention", "full_attention", "full_attention"});
  qwen["use_sliding_window"] = true;
  const auto on = LlamaConfig::from_json(qwen, "c");
  CHECK(on.layer_types == std::vector<std::string>{"full_attention", "sliding_attention", "sliding_attention"});
  CHECK(on.layer_sliding_window(0) == 0);
  CHECK(on.layer_sliding_window(1) == 4);
  CHECK(on.layer_sliding_window(2) == 4);
  // Explicit layer_types win over max_window_layers.
  qwen["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  const auto explicit_types = LlamaConfig::from_json(qwen, "c");
  CHECK(explicit_types.layer_sliding_window(0) == 4);
  CHECK(explicit_types.layer_sliding_window(1) == 0);
  // use_sliding_window with a null window: none; with no sliding_window at all: Qwen's 4096.
  qwen.erase("layer_types");
  qwen["sliding_window"] = nullptr;
  CHECK(LlamaConfig::from_json(qwen, "c").sliding_window == 0);
  qwen.erase("sliding_window");
  CHECK(LlamaConfig::from_json(qwen, "c").layer_sliding_window(2) == 4096);
  // Llama has no sliding window (LlamaForCausalLM ignores such fields).
  auto llama = tiny_llama();
  llama["sliding_window"] = 4;
  CHECK(LlamaConfig::from_json(llama, "c").layer_sliding_window(0) == 0);
}

TEST_CASE("LlamaConfig round-trips every field through to_json", "[models][config]") {
  std::vector<json> configs;
  configs.push_back(tiny_llama());
  auto gelu = tiny_llama();
  gelu["hidden_act"] = "gelu_pytorch_tanh";
  gelu["attention_bias"] = true;
  gelu["mlp_bias"] = true;
  configs.push_back(gelu);
  auto mistral = tiny_llama();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4;
  configs.push_back(mistral);
  auto qwen2 = tiny_qwen("qwen2");
  qwen2["use_sliding_window"] = true;
  qwen2["sliding_window"] = 8;
  qwen2["max_window_layers"] = 2;
  configs.push_back(qwen2);
  auto qwen3 = tiny_qwen("qwen3");
  qwen3["head_dim"] = 16;
  qwen3["attention_bias"] = true;
  qwen3["hidden_act"] = "gelu";
  qwen3["use_sliding_window"] = true;
  qwen3["sliding_window"] = 4;
  qwen3["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  configs.push_back(qwen3);
  for (const json& config : configs) {
    INFO(config.dump());
    const auto original = LlamaConfig::from_json(config, "c");
    const json written = original.to_json();
    const auto again = LlamaConfig::from_json(written, "written");
    CHECK(again == original);
    CHECK(written.at("hidden_act") == original.hidden_act);
  }
  const json written_qwen3 = LlamaConfig::from_json(qwen3, "c").to_json();
  CHECK(written_qwen3.at("model_type") == "qwen3");
  CHECK(written_qwen3.at("head_dim") == 16);
  CHECK(written_qwen3.at("attention_bias") == true);
  CHECK(written_qwen3.at("use_sliding_window") == true);
  CHECK(written_qwen3.at("sliding_window") == 4);
  CHECK(written_qwen3.at("layer_types") == json({"sliding_attention", "full_attention", "sliding_attention"}));
  const json written_qwen2 = LlamaConfig::from_json(qwen2, "c").to_json();
  CHECK(written_qwen2.at("max_window_layers") == 2);  // as read, not num_hidden_layers
  CHECK(written_qwen2.at("layer_types") == json({"full_attention", "full_attention", "sliding_attention"}));
  CHECK(LlamaConfig::from_json(mistral, "c").to_json().at("sliding_window") == 4);
  CHECK(LlamaConfig::from_json(gelu, "c").to_json().at("hidden_act") == "gelu_pytorch_tanh");
}

TEST_CASE("LlamaConfig refuses settings whose maths tune does not implement, naming file, field and value",
          "[models][config]") {
  auto refused = [](const json& config, std::initializer_list<const char*> needles) {
    const std::string message = error_of(config);
    INFO(message);
    CHECK_THAT(message, Catch::Contains("models/x/config.json"));
    for (const char* needle : needles) CHECK_THAT(message, Catch::Contains(needle));
  };
  auto config = tiny_llama();
  config["hidden_act"] = "relu";
  refused(config, {"'hidden_act'", "relu", "silu, swish, gelu, gelu_pytorch_tanh, gelu_new"});

  config = tiny_llama();
  config["attention_dropout"] = 0.1;
  refused(config, {"'attention_dropout'", "0.1"});

  config = tiny_llama();
  config["partial_rotary_factor"] = 0.5;
  refused(config, {"'partial_rotary_factor'", "0.5"});

  config = tiny_llama();
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}};
  refused(config, {"'rope_parameters.partial_rotary_factor'", "0.25"});

  config = tiny_llama();
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"mrope_section", {16, 24, 24}}};
  refused(config, {"'rope_parameters.mrope_section'"});

  config = tiny_llama();
  config["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                               {"sliding_attention", {{"rope_type", "default"}}}};
  refused(config, {"'rope_parameters.full_attention'", "per layer type"});

  config = tiny_llama();
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  refused(config, {"'quantization_config.quant_method'", "gptq", "bitsandbytes 4-bit"});

  // Sliding windows.
  config = tiny_llama();
  config["model_type"] = "mistral";
  config["sliding_window"] = 0;
  refused(config, {"'sliding_window'", "positive"});
  config["sliding_window"] = 4;
  config["layer_types"] = {"full_attention", "sliding_attention"};
  refused(config, {"'layer_types'", "full_attention", "MistralForCausalLM"});

  config = tiny_qwen("qwen2");
  config["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};  // and no window
  refused(config, {"'layer_types'", "layer 1", "sliding_attention", "no window"});
  config["use_sliding_window"] = true;
  config["sliding_window"] = 4;
  config["layer_types"] = {"full_attention", "sliding_attention"};
  refused(config, {"'layer_types'", "2 entries", "3 layers"});
  config["layer_types"] = {"full_attention", "chunked_attention", "full_attention"};
  refused(config, {"'layer_types'", "chunked_attention"});
  config.erase("layer_types");
  config["max_window_layers"] = -1;
  refused(config, {"'max_window_layers'", "-1"});
  config["max_window_layers"] = 1;
  config["sliding_window"] = -3;
  refused(config, {"'sliding_window'", "-3"});

  config = tiny_qwen("qwen3");
  config["hidden_act"] = "gelu_fast";
  refused(config, {"'hidden_act'", "gelu_fast"});
}

TEST_CASE("LlamaConfig reads Gemma 2 with Gemma2Config's defaults and refuses what tune does not implement",
          "[models][config][gemma2]") {
  // The defaults of transformers 5.23's configuration_gemma2.py (gemma-2-2b).
  const auto defaults = LlamaConfig::from_json(json{{"model_type", "gemma2"}}, "c");
  CHECK(defaults.architecture == "Gemma2ForCausalLM");
  CHECK(defaults.hidden_size == 2304);
  CHECK(defaults.num_key_value_heads == 4);
  CHECK(defaults.head_dim == 256);
  CHECK(defaults.tie_word_embeddings);
  CHECK(defaults.hidden_act == "gelu_pytorch_tanh");
  CHECK(defaults.query_pre_attn_scalar == 256);
  CHECK(defaults.attn_logit_softcapping == 50.0);
  CHECK(defaults.final_logit_softcapping == 30.0);
  CHECK(defaults.bos_token_id == 2);
  CHECK(defaults.eos_token_ids == std::vector<int64_t>{1});
  CHECK(defaults.pad_token_id == 0);
  CHECK(defaults.embedding_multiplier() == Approx(48.0));
  // Gemma2Config's layer_types rule: "sliding_attention" if (i + 1) % 2 else "full_attention".
  for (int64_t layer = 0; layer < defaults.num_hidden_layers; ++layer) {
    CHECK(defaults.layer_sliding_window(layer) == (layer % 2 == 0 ? 4096 : 0));
  }
  CHECK(LlamaConfig::from_json(defaults.to_json(), "round trip") == defaults);

  // Gemma2's MLP reads hidden_activation; a hidden_act beside it is ignored, as transformers ignores it.
  json config = {{"model_type", "gemma2"}, {"hidden_act", "silu"}, {"hidden_activation", "gelu"}};
  CHECK(LlamaConfig::from_json(config, "c").hidden_act == "gelu");
  CHECK(defaults.to_json().contains("hidden_activation"));
  config["hidden_activation"] = "relu";
  CHECK_THAT(error_of(config), Catch::Contains("models/x/config.json") && Catch::Contains("hidden_activation"));
  // Null soft caps mean none; a null window with sliding layers is refused, as transformers' mask builder raises.
  config = {{"model_type", "gemma2"}, {"attn_logit_softcapping", nullptr}, {"final_logit_softcapping", nullptr}};
  const auto uncapped = LlamaConfig::from_json(config, "c");
  CHECK(uncapped.attn_logit_softcapping == 0.0);
  CHECK(uncapped.final_logit_softcapping == 0.0);
  CHECK(LlamaConfig::from_json(uncapped.to_json(), "round trip") == uncapped);
  config = {{"model_type", "gemma2"}, {"sliding_window", nullptr}};
  CHECK_THAT(error_of(config), Catch::Contains("layer_types") && Catch::Contains("no window"));
  config["layer_types"] = json::array({"full_attention", "full_attention"});
  config["num_hidden_layers"] = 2;
  CHECK(LlamaConfig::from_json(config, "c").layer_sliding_window(0) == 0);
  // Values that change the maths tune does not implement, each named.
  config = {{"model_type", "gemma2"}, {"use_bidirectional_attention", true}};
  CHECK_THAT(error_of(config), Catch::Contains("use_bidirectional_attention"));
  config = {{"model_type", "gemma2"}, {"architectures", json::array({"Gemma2ForSequenceClassification"})}};
  CHECK_THAT(error_of(config), Catch::Contains("architectures") && Catch::Contains("Gemma2ForSequenceClassification"));
  config = {{"model_type", "gemma2"}, {"architectures", json::array({"Gemma2Model"})}};
  CHECK(LlamaConfig::from_json(config, "c").architecture == "Gemma2Model");
  config = {{"model_type", "gemma2"}, {"query_pre_attn_scalar", -1}};
  CHECK_THAT(error_of(config), Catch::Contains("query_pre_attn_scalar"));
  config = {{"model_type", "gemma2"}, {"attention_dropout", 0.1}};
  CHECK_THAT(error_of(config), Catch::Contains("attention_dropout"));
}
