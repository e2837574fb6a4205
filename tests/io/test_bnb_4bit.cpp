// io/bnb_4bit.h on directories transformers + bitsandbytes wrote (tests/fixtures/nf4/model_*, from
// scripts/make_nf4_fixture.py): every quantised weight read and dequantised equals bitsandbytes' own dequantisation of
// the saved tensors bit for bit; quantization_config parses; and each malformed input is refused naming the key or
// tensor at fault.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>

#include "io_test_helpers.h"
#include "tune/io/bnb_4bit.h"
#include "tune/io/json_file.h"
#include "tune/io/weights.h"

using tune::io::testing::input_error_message;

namespace {

std::filesystem::path model_dir(const std::string& name) {
  return std::filesystem::path(TUNE_SOURCE_DIR) / "tests/fixtures/nf4" / name;
}

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto bytes = [](const torch::Tensor& t) { return t.contiguous().reshape({-1}).view(torch::kUInt8); };
  return torch::equal(bytes(a), bytes(b));
}

// Every weight bitsandbytes quantised, read through the WeightSource overload and compared with expected.safetensors.
int64_t check_every_quantised_weight(const std::string& name) {
  const auto source = tune::io::WeightSource::open_directory(model_dir(name));
  const auto expected = tune::io::SafetensorsFile::open(model_dir(name) / "expected.safetensors");
  int64_t checked = 0;
  for (const auto& [weight, entry] : expected.entries()) {
    INFO(name << ": " << weight);
    REQUIRE(tune::io::is_bnb_4bit_weight(source, weight));
    const auto nf4 = tune::io::read_bnb_4bit_weight(source, weight);
    CHECK(nf4.shape == entry.shape);
    CHECK(nf4.dtype == torch::kBFloat16);
    CHECK(bitwise_equal(tune::precision::dequantize_nf4(nf4), expected.load(weight)));
    ++checked;
  }
  return checked;
}

// A lookup over the double-quantised fixture's q_proj tensors that tests can edit.
struct EditableCheckpoint {
  std::map<std::string, torch::Tensor> tensors;
  EditableCheckpoint() {
    const auto source = tune::io::WeightSource::open_directory(model_dir("model_double_quant"));
    for (const auto& name : source.names()) {
      if (name.rfind(kWeight, 0) == 0) tensors[name] = source.load(name);
    }
  }
  tune::io::TensorLookup lookup() const {
    return [this](const std::string& name) {
      const auto found = tensors.find(name);
      return found == tensors.end() ? torch::Tensor() : found->second;
    };
  }
  void set_state_json(const std::string& text) {
    tensors[std::string(kWeight) + ".quant_state.bitsandbytes__nf4"] =
        torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())}, torch::kUInt8).clone();
  }
  std::string state_json() const {
    const auto& t = tensors.at(std::string(kWeight) + ".quant_state.bitsandbytes__nf4");
    return std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()), static_cast<size_t>(t.numel()));
  }
  std::string read_error() const {
    return input_error_message([&] { tune::io::read_bnb_4bit_weight(lookup(), kWeight, "ckpt"); });
  }
  static constexpr const char* kWeight = "model.layers.0.self_attn.q_proj.weight";
};

nlohmann::json quantization_config(const std::string& name) {
  return tune::io::read_json_file(model_dir(name) / "config.json").at("quantization_config");
}

}  // namespace

TEST_CASE("bnb_4bit: a double-quantised directory reads as bitsandbytes dequantises it", "[bnb_4bit]") {
  CHECK(check_every_quantised_weight("model_double_quant") == 7);  // q, k, v, o, gate, up, down of one layer
  const auto source = tune::io::WeightSource::open_directory(model_dir("model_double_quant"));
  const auto q = tune::io::read_bnb_4bit_weight(source, "model.layers.0.self_attn.q_proj.weight");
  CHECK(q.double_quantized());
  CHECK(q.blocksize == 64);
  CHECK(q.absmax.scalar_type() == torch::kUInt8);
  CHECK(q.nested_blocksize == 256);
  CHECK(torch::equal(q.nested_code, tune::precision::dynamic_map_signed()));
  // embeddings, norms and the output layer stay plain
  CHECK_FALSE(tune::io::is_bnb_4bit_weight(source, "lm_head.weight"));
  CHECK_FALSE(tune::io::is_bnb_4bit_weight(source, "model.embed_tokens.weight"));
  CHECK_FALSE(tune::io::is_bnb_4bit_weight(source, "model.norm.weight"));

  const auto config = tune::io::parse_bnb_quantization_config(quantization_config("model_double_quant"), "config.json");
  CHECK(config.double_quant);
  CHECK(config.compute_dtype == torch::kBFloat16);
  CHECK(config.quant_storage == torch::kUInt8);
  CHECK_FALSE(config.skip_modules.has_value());
}

TEST_CASE("bnb_4bit: packed bytes stored as bf16 (bnb_4bit_quant_storage), no double quantisation, skipped modules",
          "[bnb_4bit]") {
  CHECK(check_every_quantised_weight("model_bf16_storage") == 6);  // down_proj was skipped
  const auto source = tune::io::WeightSource::open_directory(model_dir("model_bf16_storage"));
  CHECK(source.load("model.layers.0.self_attn.q_proj.weight").scalar_type() == torch::kBFloat16);
  const auto q = tune::io::read_bnb_4bit_weight(source, "model.layers.0.self_attn.q_proj.weight");
  CHECK_FALSE(q.double_quantized());
  CHECK(q.absmax.scalar_type() == torch::kFloat32);
  CHECK(q.packed.scalar_type() == torch::kUInt8);
  CHECK(q.packed.numel() == 64 * 64 / 2);
  CHECK_FALSE(tune::io::is_bnb_4bit_weight(source, "model.layers.0.mlp.down_proj.weight"));
  CHECK(source.load("model.layers.0.mlp.down_proj.weight").scalar_type() == torch::kBFloat16);

  const auto config = tune::io::parse_bnb_quantization_config(quantization_config("model_bf16_storage"), "config.json");
  CHECK_FALSE(config.double_quant);
  CHECK(config.quant_storage == torch::kBFloat16);
  REQUIRE(config.skip_modules.has_value());
  CHECK(*config.skip_modules == std::vector<std::string>{"lm_head", "down_proj"});
}

TEST_CASE("bnb_4bit: quantization_config errors name the key", "[bnb_4bit]") {
  const nlohmann::json good = quantization_config("model_double_quant");
  const auto error_with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json edited = good;
    if (value.is_discarded()) {
      edited.erase(key);
    } else {
      edited[key] = value;
    }
    return input_error_message([&] { tune::io::parse_bnb_quantization_config(edited, "dir/config.json"); });
  };
  const auto removed = nlohmann::json(nlohmann::json::value_t::discarded);
  CHECK_THAT(error_with("bnb_4bit_quant_type", "fp4"),
             Catch::Contains("dir/config.json: field 'quantization_config.bnb_4bit_quant_type' is 'fp4'") &&
                 Catch::Contains("NF4 only"));
  CHECK_THAT(error_with("bnb_4bit_quant_type", removed), Catch::Contains("'fp4'"));  // BitsAndBytesConfig's default
  CHECK_THAT(error_with("quant_method", "gptq"), Catch::Contains("'quantization_config.quant_method' is 'gptq'"));
  CHECK_THAT(error_with("load_in_8bit", true), Catch::Contains("'quantization_config.load_in_8bit'"));
  nlohmann::json not_4bit = good;
  not_4bit["load_in_4bit"] = false;
  not_4bit["_load_in_4bit"] = false;
  CHECK_THAT(input_error_message([&] { tune::io::parse_bnb_quantization_config(not_4bit, "c"); }),
             Catch::Contains("'quantization_config.load_in_4bit'"));
  CHECK_THAT(error_with("bnb_4bit_compute_dtype", "float8"),
             Catch::Contains("'quantization_config.bnb_4bit_compute_dtype' is 'float8'") &&
                 Catch::Contains("BFloat16"));
  CHECK_THAT(error_with("bnb_4bit_quant_storage", "complex64"),
             Catch::Contains("'quantization_config.bnb_4bit_quant_storage'"));
  CHECK_THAT(error_with("bnb_4bit_use_double_quant", "yes"),
             Catch::Contains("'quantization_config.bnb_4bit_use_double_quant' must be true or false"));
  CHECK_THAT(error_with("llm_int8_skip_modules", "lm_head"),
             Catch::Contains("'quantization_config.llm_int8_skip_modules'"));
  CHECK_THAT(input_error_message([] { tune::io::parse_bnb_quantization_config(nlohmann::json(3), "c"); }),
             Catch::Contains("'quantization_config' must be an object"));
  // defaults and an empty skip list
  const nlohmann::json minimal = {
      {"load_in_4bit", true}, {"bnb_4bit_quant_type", "nf4"}, {"llm_int8_skip_modules", nlohmann::json::array()}};
  const auto config = tune::io::parse_bnb_quantization_config(minimal, "c");
  CHECK_FALSE(config.double_quant);
  CHECK(config.compute_dtype == torch::kFloat32);
  CHECK(config.quant_storage == torch::kUInt8);
  CHECK(config.skip_modules == std::vector<std::string>{});
}

TEST_CASE("bnb_4bit: a malformed weight is refused naming the tensor", "[bnb_4bit]") {
  const std::string weight = EditableCheckpoint::kWeight;
  {
    EditableCheckpoint checkpoint;  // untouched: reads
    CHECK(tune::io::read_bnb_4bit_weight(checkpoint.lookup(), weight, "ckpt").double_quantized());
  }
  {
    EditableCheckpoint checkpoint;
    checkpoint.tensors.erase(weight + ".absmax");
    CHECK_THAT(checkpoint.read_error(), Catch::Contains("ckpt: tensor '" + weight + ".absmax' is missing"));
  }
  {
    EditableCheckpoint checkpoint;
    checkpoint.tensors.erase(weight + ".quant_state.bitsandbytes__nf4");
    CHECK_THAT(checkpoint.read_error(), Catch::Contains(".quant_state.bitsandbytes__nf4' is missing"));
  }
  {
    EditableCheckpoint checkpoint;
    checkpoint.tensors.erase(weight + ".nested_quant_map");
    CHECK_THAT(checkpoint.read_error(), Catch::Contains(".nested_quant_map' is missing"));
  }
  {
    EditableCheckpoint checkpoint;
    checkpoint.tensors[weight + ".quant_state.bitsandbytes__fp4"] = torch::zeros({1}, torch::kUInt8);
    CHECK_THAT(checkpoint.read_error(), Catch::Contains("bitsandbytes__fp4' marks an FP4 weight"));
  }
  {
    EditableCheckpoint checkpoint;
    checkpoint.set_state_json("{\"quant_type\": ");
    CHECK_THAT(checkpoint.read_error(), Catch::Contains("does not hold valid JSON"));
  }
  {
    EditableCheckpoint checkpoint;
    auto state = nlohmann::json::parse(checkpoint.state_json());
    state["quant_type"] = "fp4";
    checkpoint.set_state_json(state.dump());
    CHECK_THAT(checkpoint.read_error(), Catch::Contains("field 'quant_type' is 'fp4'"));
  }
  {
    EditableCheckpoint checkpoint;
    auto state = nlohmann::json::parse(checkpoint.state_json());
    state["shape"] = {64, 65};
    checkpoint.set_state_json(state.dump());
    CHECK_THAT(checkpoint.read_error(),
               Catch::Contains("holds 2048 bytes") && Catch::Contains("packs into 2080 bytes"));
  }
  {
    EditableCheckpoint checkpoint;
    auto state = nlohmann::json::parse(checkpoint.state_json());
    state.erase("nested_offset");
    checkpoint.set_state_json(state.dump());
    CHECK_THAT(checkpoint.read_error(), Catch::Contains("field 'nested_offset' is missing"));
  }
  {
    EditableCheckpoint checkpoint;
    auto state = nlohmann::json::parse(checkpoint.state_json());
    state["blocksize"] = 100;
    checkpoint.set_state_json(state.dump());
    CHECK_THAT(checkpoint.read_error(), Catch::Contains("weight '" + weight + "': NF4 field 'blocksize'"));
  }
  {
    EditableCheckpoint checkpoint;
    checkpoint.tensors[weight + ".absmax"] = checkpoint.tensors[weight + ".absmax"].to(torch::kFloat32);
    CHECK_THAT(checkpoint.read_error(), Catch::Contains("NF4 field 'absmax' must be a contiguous CPU Byte tensor"));
  }
}
