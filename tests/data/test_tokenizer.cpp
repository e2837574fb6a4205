// Tokenizer: ids checked against Python sentencepiece (tiny_expected.json), BOS/EOS/pad rules, special-token text,
// load errors.
#include <catch2/catch.hpp>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data_test_helpers.h"
#include "tune/core/error.h"

using namespace tune::data;
using tune::data::testing::fixture;
using tune::data::testing::tiny_tokenizer;

namespace {
nlohmann::json expected() {
  std::ifstream file(fixture("tiny_expected.json"));
  return nlohmann::json::parse(file);
}
std::vector<int64_t> ids_of(const nlohmann::json& ids) { return ids.get<std::vector<int64_t>>(); }
}  // namespace

TEST_CASE("tokenizer ids match Python sentencepiece", "[data][tokenizer]") {
  const auto truth = expected();
  const Tokenizer& tokenizer = tiny_tokenizer();
  CHECK(tokenizer.vocab_size() == truth["vocab_size"].get<int64_t>());
  CHECK(tokenizer.bos_id() == truth["bos_id"].get<int64_t>());
  CHECK(tokenizer.eos_id() == truth["eos_id"].get<int64_t>());
  CHECK(tokenizer.pad_id() == truth["pad_id"].get<int64_t>());
  for (const auto& entry : truth["cases"]) {
    const std::string text = entry["text"];
    INFO("text: " << text);
    const auto ids = ids_of(entry["ids"]);
    CHECK(tokenizer.encode(text, false, false) == ids);
    CHECK(tokenizer.decode(ids) == entry["decoded"].get<std::string>());
    for (size_t i = 0; i < ids.size(); ++i) CHECK(tokenizer.piece(ids[i]) == entry["pieces"][i].get<std::string>());
  }
}

TEST_CASE("tokenizer adds BOS by default and EOS on request, and decode skips them", "[data][tokenizer]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  const auto body = tokenizer.encode("q m d k", false, false);
  REQUIRE(!body.empty());
  auto with_bos = body;
  with_bos.insert(with_bos.begin(), tokenizer.bos_id());
  CHECK(tokenizer.encode("q m d k") == with_bos);
  auto with_both = with_bos;
  with_both.push_back(tokenizer.eos_id());
  CHECK(tokenizer.encode("q m d k", true, true) == with_both);
  with_both.push_back(tokenizer.pad_id());
  CHECK(tokenizer.decode(with_both) == "q m d k");
  CHECK(tokenizer.encode("", true, true) == std::vector<int64_t>{tokenizer.bos_id(), tokenizer.eos_id()});
}

TEST_CASE("tokenizer pieces: special symbols, unknown pieces, out-of-range ids", "[data][tokenizer]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  CHECK(tokenizer.piece_to_id("<|im_start|>") == 4);
  CHECK(tokenizer.piece_to_id("<|im_end|>") == 5);
  CHECK(tokenizer.piece_to_id("<unk>") == 0);
  CHECK(tokenizer.piece_to_id("no-such-piece") == -1);
  // <|im_start|> is one token inside text, as the chatml template needs.
  CHECK(tokenizer.encode("<|im_start|>", false, false) == std::vector<int64_t>{tokenizer.piece_to_id("\xE2\x96\x81"), 4});
  // Ids past the vocabulary (a padded embedding) read as unknown rather than crash.
  CHECK(tokenizer.piece(tokenizer.vocab_size() + 5) == "<unk>");
  CHECK(tokenizer.decode({tokenizer.vocab_size() + 5}) == " \xE2\x81\x87 ");
}

TEST_CASE("sentencepiece: special-token text is its id, and text after it gets no leading space", "[data][tokenizer]") {
  // As transformers encodes a tokenizer.model (it splits at special tokens; legacy=False): what a chat template's
  // rendered "<s>...</s>" must become. test_builtin_chat_templates.cpp checks whole conversations against it.
  const Tokenizer& tokenizer = tiny_tokenizer();
  const auto ids = tokenizer.encode("<s>b a</s>b", false, false);
  REQUIRE(ids.size() >= 4);
  CHECK(ids.front() == tokenizer.bos_id());
  CHECK(tokenizer.piece(ids[1]) == "b");  // not "▁b", as sentencepiece alone would begin a text
  CHECK(std::count(ids.begin(), ids.end(), tokenizer.eos_id()) == 1);
  CHECK(tokenizer.piece(ids.back()) == "b");
  // A text's start keeps sentencepiece's "▁" prefix (its own piece in this small vocabulary, or "▁b").
  CHECK_THAT(tokenizer.piece(tokenizer.encode("b a", false, false).front()), Catch::StartsWith("\xE2\x96\x81"));
  CHECK(tokenizer.decode(ids) == "b ab");
}

TEST_CASE("tokenizer load errors name the file", "[data][tokenizer]") {
  CHECK_THROWS_WITH(Tokenizer::load("/nonexistent/tokenizer.model"),
                    Catch::Contains("/nonexistent/tokenizer.model") && Catch::Contains("does not exist"));
  const auto garbage = tune::data::testing::write_file("garbage.model", "this is not a protobuf\n");
  CHECK_THROWS_AS(Tokenizer::load(garbage), tune::InputError);
  CHECK_THROWS_WITH(Tokenizer::load(garbage), Catch::Contains(garbage.string()) && Catch::Contains("sentencepiece"));
  CHECK_THROWS_AS(Tokenizer::load(garbage.parent_path()), tune::InputError);
}

TEST_CASE("tokenizer without a pad piece pads with EOS", "[data][tokenizer]") {
  const auto truth = expected()["no_pad"];
  const auto tokenizer = Tokenizer::load(fixture("tiny_nopad.model"));
  REQUIRE(truth["pad_id"].get<int64_t>() == -1);
  CHECK(tokenizer.eos_id() == truth["eos_id"].get<int64_t>());
  CHECK(tokenizer.pad_id() == tokenizer.eos_id());
}
