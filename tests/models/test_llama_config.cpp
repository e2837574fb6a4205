// LlamaConfig: reading HF config.json (defaults per model_type, eos forms, rope_scaling forms), writing it back,
// and the errors for unsupported or inconsistent settings.
#include <catch2/catch.hpp>

#include <string>

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
