// The T5 encoder and T5's tokenizer against Hugging Face transformers' T5EncoderModel and T5Tokenizer
// (scripts/make_t5_fixture.py, run by CTest as t5_fixture_setup into the build tree). Without transformers or
// sentencepiece the fixture holds SKIPPED and the test exits 77: CTest reports it skipped, never passed.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "common/reference_fixture.h"
#include "tune/core/error.h"
#include "tune/core/utf8.h"
#include "tune/data/hf/precompiled_charsmap.h"
#include "tune/data/python_str.h"
#include "tune/data/sentencepiece_backend.h"
#include "tune/data/sentencepiece_model_proto.h"
#include "tune/data/t5_prompt.h"
#include "tune/data/tokenizer.h"
#include "tune/io/json_file.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/models/t5_encoder.h"

using namespace tune;

namespace {

std::filesystem::path fixture_dir() { return test::reference_fixture_dir("t5_fixture"); }

void skip_without_transformers() { test::skip_if_fixture_skipped(fixture_dir()); }

io::SafetensorsFile reference() {
  skip_without_transformers();
  return io::SafetensorsFile::open(fixture_dir() / "io.safetensors");
}

std::vector<std::string> prompts() {
  const auto json = io::read_json_file(fixture_dir() / "prompts.json");
  return json.at("prompts").get<std::vector<std::string>>();
}

using test::relative_max_diff;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

// A copy of the fixture's encoder as one model.safetensors whose tensors `edit` may rename or drop.
std::filesystem::path rewritten_encoder(const testing::ScratchDir& scratch,
                                        const std::function<void(std::map<std::string, torch::Tensor>&)>& edit) {
  const auto source = io::WeightSource::open_directory(fixture_dir() / "text_encoder");
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& name : source.names()) tensors[name] = source.load(name);
  edit(tensors);
  const auto dir = scratch / "encoder";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture_dir() / "text_encoder" / "config.json", dir / "config.json");
  io::save_safetensors(dir / "model.safetensors", {tensors.begin(), tensors.end()});
  return dir;
}

torch::Tensor encode_fixture_prompts(models::T5Encoder& encoder, const io::SafetensorsFile& io, const char* ids,
                                     const char* mask) {
  torch::NoGradGuard no_grad;
  return encoder->forward(io.load(ids), io.load(mask));
}

}  // namespace

TEST_CASE("T5 tokenizer: ids equal transformers' T5Tokenizer", "[t5][tokenizer]") {
  skip_without_transformers();
  const auto cases = io::read_json_file(fixture_dir() / "tokenizer_cases.json");
  // tokenizer/: spiece.model with T5 v1.1's config files; tokenizer_with_json/: also a Unigram tokenizer.json,
  // which tune does not read (transformers gives both the same ids, checked by the fixture script).
  for (const char* directory : {"tokenizer", "tokenizer_with_json"}) {
    INFO(directory);
    const auto tokenizer = data::Tokenizer::load(fixture_dir() / directory);
    CHECK(tokenizer.model_path().filename() == "spiece.model");
    CHECK(tokenizer.bos_id() == -1);
    CHECK(tokenizer.eos_id() == 1);
    CHECK(tokenizer.pad_id() == 0);
    CHECK(tokenizer.vocab_size() == 500);  // 400 pieces + 100 sentinels
    CHECK(tokenizer.piece_to_id("<extra_id_0>") == 499);
    CHECK(tokenizer.piece_to_id("<extra_id_99>") == 400);
    CHECK(tokenizer.piece(499) == "<extra_id_0>");
    CHECK(tokenizer.is_special_token(499));
    // Every text gets transformers' ids, including those transformers 5 normalizes per grapheme cluster (a
    // combining mark or joiner after a character it rewrites may be dropped, t5_tokenizer.h) where sentencepiece's
    // own encoding differs: the fixture keeps sentencepiece's ids for those, and some must differ, or the cases
    // would not exercise that path.
    size_t mismatches = 0, normalization_differs = 0, sentencepiece_differs = 0;
    for (const auto& item : cases) {
      const auto text = item.at("text").get<std::string>();
      const auto expected = item.at("ids").get<std::vector<int64_t>>();
      // add_bos true: T5 has no BOS, so nothing is added.
      const auto ids = tokenizer.encode(text, /*add_bos=*/true, /*add_eos=*/true);
      if (item.value("normalization_differs", false)) {
        ++normalization_differs;
        sentencepiece_differs += item.at("sentencepiece_ids").get<std::vector<int64_t>>() != expected;
      }
      if (ids != expected && ++mismatches <= 5) {
        UNSCOPED_INFO("text " << item.at("text").dump() << ": tune " << nlohmann::json(ids).dump()
                              << ", transformers " << nlohmann::json(expected).dump());
      }
    }
    INFO(mismatches << " of " << cases.size() << " texts differ from transformers' ids");
    CHECK(mismatches == 0);
    CHECK(sentencepiece_differs > 0);
    WARN(directory << ": " << cases.size() << " texts give transformers' ids, " << normalization_differs
                   << " of them normalized per grapheme cluster, " << sentencepiece_differs
                   << " with ids other than sentencepiece's own");
  }
}

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_CASE("T5 tokenizer: spiece.model's normalization map applies as transformers' Precompiled normalizer",
          "[t5][tokenizer]") {
  skip_without_transformers();
  const auto spiece = fixture_dir() / "tokenizer" / "spiece.model";
  const std::string model = file_bytes(spiece);
  const data::hf::PrecompiledCharsMap map(data::sentencepiece_normalization_map(model, spiece.string()),
                                          spiece.string());
  REQUIRE_FALSE(map.empty());  // the fixture's model is trained with nmt_nfkc, as T5's is
  size_t mismatches = 0, changed = 0;
  for (const auto& item : io::read_json_file(fixture_dir() / "tokenizer_cases.json")) {
    const auto text = item.at("text").get<std::string>();
    const auto expected = item.at("normalized").get<std::string>();
    const std::string normalized = map.normalize(text);
    changed += expected != text;
    if (normalized != expected && ++mismatches <= 5) {
      UNSCOPED_INFO("text " << item.at("text").dump() << ": tune " << nlohmann::json(normalized).dump()
                            << ", transformers " << item.at("normalized").dump());
    }
  }
  CHECK(mismatches == 0);
  CHECK(changed > 100);  // the cases really exercise the map
  // Examples of the per-cluster rule: a short cluster becomes its first character's mapping alone.
  CHECK(map.normalize("\u00BD\u200D") == "1\u20442");  // ½ + ZWJ -> 1⁄2
  CHECK(map.normalize("\uFB01\u0301") == "fi");         // ﬁ + acute -> fi
  CHECK(map.normalize("abc") == "abc");
}

TEST_CASE("T5 tokenizer: the model without its normalization map keeps everything else", "[t5][tokenizer]") {
  skip_without_transformers();
  const auto spiece = fixture_dir() / "tokenizer" / "spiece.model";
  const std::string model = file_bytes(spiece);
  const std::string rewritten = data::sentencepiece_model_without_normalization_map(model, spiece.string());
  CHECK(data::sentencepiece_normalization_map(rewritten, "rewritten").empty());
  const auto original = data::load_sentencepiece_model(spiece.string());
  const auto identity = data::load_sentencepiece_model_from_bytes(spiece.string(), rewritten);
  REQUIRE(identity->piece_size() == original->piece_size());
  for (int id = 0; id < original->piece_size(); ++id) CHECK(identity->id_to_piece(id) == original->id_to_piece(id));
  // Normalized text encodes the same with either; unnormalized text only with the original.
  CHECK(identity->encode(" a red square  moving left ") == original->encode(" a red square  moving left "));
  CHECK(identity->encode("\uFF41 red") != original->encode("\uFF41 red"));  // fullwidth a: NFKC makes it "a"

  SECTION("malformed model bytes are refused by name") {
    for (const std::string bad : {std::string("\x0A\x05" "ab"), std::string("\x0B"), std::string("\x08\x80")}) {
      CHECK_THROWS_WITH(data::sentencepiece_normalization_map(bad, "m.model"),
                        Catch::Contains("m.model: not a sentencepiece model"));
      CHECK_THROWS_AS(data::sentencepiece_model_without_normalization_map(bad, "m.model"), InputError);
    }
  }
  SECTION("a normalization map whose sizes do not add up is refused by name") {
    CHECK_THROWS_WITH(data::hf::PrecompiledCharsMap(std::string("\x10\0\0\0abcd", 8), "m.model"),
                      Catch::Contains("m.model: the normalization map"));
    CHECK_THROWS_WITH(data::hf::PrecompiledCharsMap("ab", "m.model"), Catch::Contains("too short"));
  }
}

TEST_CASE("prompts are lower-cased and stripped as the pipelines' text.lower().strip() in CPython", "[t5][prompt]") {
  skip_without_transformers();
  const auto cases = io::read_json_file(fixture_dir() / "python_str_cases.json");
  std::map<char32_t, std::string> changes;
  for (const auto& change : cases.at("lower_changes")) {
    changes[change.at(0).get<char32_t>()] = change.at(1).get<std::string>();
  }
  REQUIRE(changes.size() > 1000);
  // Every code point alone: CPython's Unicode (the fixture's) and utf8proc's may differ in version, so a code point
  // whose mapping differs must be one that only the newer version assigns (none at the time of writing).
  size_t mismatches = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c < 0xE000) continue;
    const std::string character = utf8::encode_code_point(c);
    const auto change = changes.find(c);
    const std::string expected = change == changes.end() ? character : change->second;
    if (data::python_lower(character) != expected && ++mismatches <= 5) {
      UNSCOPED_INFO("U+" << std::hex << static_cast<uint32_t>(c) << std::dec << ": tune "
                         << nlohmann::json(data::python_lower(character)).dump() << ", CPython "
                         << nlohmann::json(expected).dump() << " (CPython's Unicode "
                         << cases.at("unicode_version").get<std::string>() << ")");
    }
  }
  CHECK(mismatches == 0);
  for (const auto& item : cases.at("texts")) {
    const auto text = item.at("text").get<std::string>();
    INFO("text " << item.at("text").dump());
    CHECK(data::python_strip(data::python_lower(text)) == item.at("lower_strip").get<std::string>());
  }
  CHECK(data::python_lower("A\xFF\xC3") == "a\xFF\xC3");  // bytes that are not UTF-8 are kept
  CHECK(data::python_strip(" \xFF ") == "\xFF");
}

TEST_CASE("T5 tokenizer: encode_t5_prompts equals tokenizer(padding=max_length, truncation=True)", "[t5][tokenizer]") {
  const auto io = reference();
  const auto tokenizer = data::Tokenizer::load(fixture_dir() / "tokenizer");
  for (const int64_t length : {32, 16}) {
    INFO("max_length " << length);
    const data::EncodedPrompts encoded = data::encode_t5_prompts(tokenizer, prompts(), length);
    const auto suffix = std::to_string(length);
    CHECK(torch::equal(encoded.input_ids, io.load("ids_" + suffix)));
    CHECK(torch::equal(encoded.attention_mask, io.load("mask_" + suffix)));
  }
  const auto long_prompt = io::read_json_file(fixture_dir() / "prompts.json").at("long_prompt").get<std::string>();
  const data::EncodedPrompts encoded = data::encode_t5_prompts(tokenizer, {long_prompt, prompts()[0]}, 160);
  CHECK(torch::equal(encoded.input_ids, io.load("ids_long")));
  CHECK(torch::equal(encoded.attention_mask, io.load("mask_long")));
  CHECK_THROWS_AS(data::encode_t5_prompts(tokenizer, {"x"}, 0), UsageError);
}

TEST_CASE("T5 relative position buckets equal transformers'", "[t5]") {
  const auto io = reference();
  const torch::Tensor relative = torch::arange(-300, 301, torch::kLong);
  CHECK(torch::equal(models::t5_relative_position_buckets(relative, 32, 128), io.load("buckets_32_128")));
  CHECK(torch::equal(models::t5_relative_position_buckets(relative, 16, 20), io.load("buckets_16_20")));
}

TEST_CASE("T5 encoder: parameter names are the checkpoint's", "[t5]") {
  skip_without_transformers();
  const auto weights = io::WeightSource::open_directory(fixture_dir() / "text_encoder");
  const auto names = weights.names();
  const std::set<std::string> file_names(names.begin(), names.end());
  models::T5Encoder encoder(models::read_t5_encoder_config(fixture_dir() / "text_encoder" / "config.json"));
  std::set<std::string> module_names;
  for (const auto& item : encoder->named_parameters()) module_names.insert(item.key());
  CHECK(module_names == file_names);  // the file holds shared.weight only (transformers writes one side of the tie)
}

TEST_CASE("T5 encoder: the parameter count without the model equals the file's and the module's", "[t5]") {
  skip_without_transformers();
  const auto config = models::read_t5_encoder_config(fixture_dir() / "text_encoder" / "config.json");
  const auto weights = io::WeightSource::open_directory(fixture_dir() / "text_encoder");
  int64_t in_file = 0;
  for (const auto& name : weights.names()) {
    int64_t numel = 1;
    for (const int64_t size : weights.file_of(name).entries().at(name).shape) numel *= size;
    in_file += numel;
  }
  CHECK(models::t5_encoder_parameter_count(config) == in_file);
  for (const bool gated : {false, true}) {  // T5 v1.0 (relu) and v1.1 (gated) layouts
    models::T5EncoderConfig other = config;
    other.is_gated_act = gated;
    other.num_layers = 3;
    int64_t in_module = 0;
    for (const auto& p : models::T5Encoder(other)->parameters()) in_module += p.numel();
    CHECK(models::t5_encoder_parameter_count(other) == in_module);
  }
}

TEST_CASE("T5 encoder matches transformers' T5EncoderModel in fp32", "[t5]") {
  const auto io = reference();
  auto encoder = models::load_t5_encoder(fixture_dir() / "text_encoder", torch::kFloat32, torch::kCPU);
  CHECK(!encoder->is_training());
  for (const auto& parameter : encoder->parameters()) CHECK(!parameter.requires_grad());

  const torch::Tensor mask = io.load("mask_32");
  const torch::Tensor hidden = encode_fixture_prompts(encoder, io, "ids_32", "mask_32");
  REQUIRE(hidden.sizes() == io.load("hidden_32").sizes());
  REQUIRE(hidden.scalar_type() == torch::kFloat32);
  const double real_tokens = relative_max_diff(hidden, io.load("hidden_32"), mask);
  const double all_positions = relative_max_diff(hidden, io.load("hidden_32"));
  const double against_f64 = relative_max_diff(hidden, io.load("hidden_32_f64"), mask);
  INFO("fp32, max |tune - transformers| / max |transformers|: real tokens " << real_tokens << ", all positions "
                                                                            << all_positions << ", vs float64 "
                                                                            << against_f64);
  CHECK(real_tokens < 1e-5);
  CHECK(all_positions < 1e-5);
  CHECK(against_f64 < 1e-5);

  // Distances past relative_attention_max_distance (160 tokens).
  const double long_diff =
      relative_max_diff(encode_fixture_prompts(encoder, io, "ids_long", "mask_long"), io.load("hidden_long"),
                        io.load("mask_long"));
  INFO("160 tokens: " << long_diff);
  CHECK(long_diff < 1e-5);

  // No mask: the first prompt alone, unpadded, gives its real tokens' padded-batch values.
  const int64_t length = mask[0].sum().item<int64_t>();
  torch::Tensor alone;
  {
    torch::NoGradGuard no_grad;
    alone = encoder->forward(io.load("ids_32").narrow(0, 0, 1).narrow(1, 0, length));
  }
  const double unpadded = relative_max_diff(alone, io.load("hidden_32").narrow(0, 0, 1).narrow(1, 0, length));
  INFO("unpadded first prompt: " << unpadded);
  CHECK(unpadded < 1e-5);
}

TEST_CASE("T5 encoder in bf16 stays close to transformers' fp32", "[t5]") {
  const auto io = reference();
  auto encoder = models::load_t5_encoder(fixture_dir() / "text_encoder", torch::kBFloat16, torch::kCPU);
  for (const auto& parameter : encoder->parameters()) CHECK(parameter.scalar_type() == torch::kBFloat16);
  const torch::Tensor hidden = encode_fixture_prompts(encoder, io, "ids_32", "mask_32");
  CHECK(hidden.scalar_type() == torch::kBFloat16);
  const double diff = relative_max_diff(hidden, io.load("hidden_32"), io.load("mask_32"));
  INFO("bf16: max |tune - transformers fp32| / max |transformers| = " << diff);
  CHECK(diff < 2e-2);
}

TEST_CASE("T5 v1.0 encoder (relu feed-forward) matches transformers", "[t5]") {
  const auto io = reference();
  auto encoder = models::load_t5_encoder(fixture_dir() / "text_encoder_relu", torch::kFloat32, torch::kCPU);
  CHECK(!encoder->config().is_gated_act);
  const double diff = relative_max_diff(encode_fixture_prompts(encoder, io, "ids_32", "mask_32"),
                                        io.load("hidden_relu_32"), io.load("mask_32"));
  INFO("relu: " << diff);
  CHECK(diff < 1e-5);
}

TEST_CASE("T5 encoder loads the embedding stored as encoder.embed_tokens.weight, or under both names", "[t5]") {
  const auto io = reference();
  const torch::Tensor expected = io.load("hidden_32");
  const torch::Tensor mask = io.load("mask_32");
  testing::ScratchDir only_embed_tokens, both;
  const auto renamed = rewritten_encoder(only_embed_tokens, [](auto& tensors) {
    tensors["encoder.embed_tokens.weight"] = tensors.at("shared.weight");
    tensors.erase("shared.weight");
  });
  const auto tied = rewritten_encoder(both, [](auto& tensors) {
    tensors["encoder.embed_tokens.weight"] = tensors.at("shared.weight");
    // Decoder and LM head tensors of a T5ForConditionalGeneration file are skipped.
    tensors["decoder.final_layer_norm.weight"] = torch::ones({32});
    tensors["lm_head.weight"] = torch::zeros({512, 32});
  });
  for (const auto& dir : {renamed, tied}) {
    auto encoder = models::load_t5_encoder(dir, torch::kFloat32, torch::kCPU);
    CHECK(relative_max_diff(encode_fixture_prompts(encoder, io, "ids_32", "mask_32"), expected, mask) < 1e-5);
  }
}

TEST_CASE("T5 encoder loading errors name the file and the key", "[t5]") {
  skip_without_transformers();
  testing::ScratchDir scratch;
  const auto missing = rewritten_encoder(scratch, [](auto& tensors) {
    tensors.erase("encoder.block.1.layer.0.SelfAttention.q.weight");
  });
  const std::string missing_error =
      error_of([&] { models::load_t5_encoder(missing, torch::kFloat32, torch::kCPU); });
  CHECK_THAT(missing_error, Catch::Contains(missing.string()) &&
                                Catch::Contains("encoder.block.1.layer.0.SelfAttention.q.weight"));

  const auto config_path = missing / "config.json";
  auto config = io::read_json_file(config_path);
  auto write_config = [&](const std::string& key, const nlohmann::json& value) {
    auto edited = config;
    edited[key] = value;
    io::write_json_file(config_path, edited);
  };
  write_config("feed_forward_proj", "gated-quick_gelu");
  CHECK_THAT(error_of([&] { models::read_t5_encoder_config(config_path); }),
             Catch::Contains(config_path.string()) && Catch::Contains("feed_forward_proj") &&
                 Catch::Contains("quick_gelu"));
  write_config("feed_forward_proj", "gelu-gated");
  CHECK_THAT(error_of([&] { models::read_t5_encoder_config(config_path); }), Catch::Contains("feed_forward_proj"));
  write_config("model_type", "umt5");
  CHECK_THAT(error_of([&] { models::read_t5_encoder_config(config_path); }),
             Catch::Contains(config_path.string()) && Catch::Contains("model_type") && Catch::Contains("umt5"));
  write_config("is_decoder", true);
  CHECK_THAT(error_of([&] { models::read_t5_encoder_config(config_path); }), Catch::Contains("is_decoder"));
  write_config("relative_attention_num_buckets", 2);
  CHECK_THAT(error_of([&] { models::read_t5_encoder_config(config_path); }),
             Catch::Contains("relative_attention_num_buckets"));
  write_config("d_model", 0);
  CHECK_THAT(error_of([&] { models::read_t5_encoder_config(config_path); }), Catch::Contains("d_model"));

  // fp16 is refused before anything is read.
  CHECK_THROWS_AS(models::load_t5_encoder(fixture_dir() / "text_encoder", torch::kHalf, torch::kCPU), UsageError);
  const models::T5EncoderConfig tiny = models::read_t5_encoder_config(fixture_dir() / "text_encoder" / "config.json");
  CHECK_THROWS_AS(models::T5Encoder(tiny, torch::TensorOptions().dtype(torch::kHalf)), UsageError);

  // A token id past the embedding: the tokenizer does not belong to the model.
  models::T5Encoder encoder(tiny);
  CHECK_THAT(error_of([&] { encoder->forward(torch::tensor({{1, 512}}, torch::kLong)); }),
             Catch::Contains("512") && Catch::Contains("vocab_size 512"));
}

TEST_CASE("T5 config: feed_forward_proj gives the activation as transformers derives it", "[t5]") {
  auto read = [](const std::string& projection) {
    return models::t5_encoder_config_from_json({{"model_type", "t5"}, {"feed_forward_proj", projection}}, "test");
  };
  CHECK(read("gated-gelu").is_gated_act);
  CHECK(read("gated-gelu").dense_act_fn == "gelu_new");
  CHECK(!read("gelu").is_gated_act);
  CHECK(read("gelu").dense_act_fn == "gelu");  // erf GELU: only "gated-gelu" is rewritten
  CHECK(read("gated-silu").dense_act_fn == "silu");
  CHECK(read("relu") == models::T5EncoderConfig{});  // T5Config's defaults
  // dense_act_fn and is_gated_act are recomputed from feed_forward_proj by T5Config, so ignored here too.
  const auto config = models::t5_encoder_config_from_json(
      {{"model_type", "t5"}, {"feed_forward_proj", "gated-gelu"}, {"dense_act_fn", "relu"}, {"is_gated_act", false}},
      "test");
  CHECK(config.is_gated_act);
  CHECK(config.dense_act_fn == "gelu_new");
}

TEST_CASE("T5 tokenizer: files that add tokens T5 does not have are refused by name", "[t5][tokenizer]") {
  skip_without_transformers();
  testing::ScratchDir scratch;
  std::filesystem::copy_file(fixture_dir() / "tokenizer" / "spiece.model", scratch / "spiece.model");
  const auto added = scratch.write("added_tokens.json", R"({"<extra_id_0>": 499, "<new_token>": 500})");
  CHECK_THAT(error_of([&] { data::Tokenizer::load(scratch.path()); }),
             Catch::Contains(added.string()) && Catch::Contains("<new_token>"));
  scratch.write("added_tokens.json", R"({"<extra_id_0>": 400})");  // extra_id_0 is the last id, not the first
  CHECK_THAT(error_of([&] { data::Tokenizer::load(scratch.path()); }), Catch::Contains("<extra_id_0>"));
  std::filesystem::remove(added);
  const auto config = scratch.write("tokenizer_config.json", R"({"tokenizer_class": "AlbertTokenizer"})");
  CHECK_THAT(error_of([&] { data::Tokenizer::load(scratch.path()); }),
             Catch::Contains(config.string()) && Catch::Contains("tokenizer_class"));
  scratch.write("tokenizer_config.json", R"({"extra_ids": 10})");
  const auto ten_sentinels = data::Tokenizer::load(scratch.path());
  CHECK(ten_sentinels.vocab_size() == 410);
  CHECK(ten_sentinels.encode("<extra_id_0>", true, true) == std::vector<int64_t>{409, 1});
  CHECK(ten_sentinels.encode("<extra_id_10>", true, true) != std::vector<int64_t>{400, 1});
}
