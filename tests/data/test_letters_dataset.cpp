// Manual smoke check of the generated letters dataset through the whole data layer (hidden: needs generated
// data). Run: python3 scripts/make_letters_data.py && scripts/train_tokenizer.sh data/letters/tokenizer.model
//             build/tests/data/test_data "[letters]"
#include <catch2/catch.hpp>

#include <algorithm>

#include "data_test_helpers.h"
#include "tune/data/sft_loader.h"

using namespace tune::data;

TEST_CASE("letters dataset reads, tokenizes and packs with every template", "[.][letters]") {
  const std::filesystem::path directory = std::getenv("TUNE_LETTERS_DIR") ? std::getenv("TUNE_LETTERS_DIR")
                                                                         : std::string(TUNE_SOURCE_DIR) + "/data/letters";
  const auto tokenizer = Tokenizer::load(directory / "tokenizer.model");
  ReadReport report;
  const auto train = read_jsonl(directory / "train.jsonl", DataFormat::automatic, OnBadLine::fail, &report);
  const auto test = read_jsonl(directory / "test.jsonl", DataFormat::automatic, OnBadLine::fail);
  CHECK(report.rows_skipped == 0);
  for (const auto& name : ChatTemplate::built_in_names()) {
    TokenizeReport tokenize_report;
    auto examples = tokenize_all(train, tokenizer, ChatTemplate::by_name(name), 128, false, &tokenize_report);
    CHECK(tokenize_report.truncated == 0);
    CHECK(tokenize_report.dropped_no_loss == 0);
    size_t longest = 0, unknown = 0;
    for (const auto& example : examples) {
      longest = std::max(longest, example.input_ids.size());
      unknown += std::count(example.input_ids.begin(), example.input_ids.end(), 0);
    }
    CHECK(unknown == 0);
    LoaderOptions options;
    options.batch_size = 8;
    options.max_length = 128;
    SftLoader loader(std::move(examples), options);
    WARN(name << ": " << train.size() << " train / " << test.size() << " test conversations, longest " << longest
              << " tokens, " << loader.batches_per_epoch() << " packed batches of 8x128 per epoch");
    std::string layout;
    for (const auto& [trained, text] :
         testing::mask_runs(tokenizer, ChatTemplate::by_name(name).encode(tokenizer, train.front(), false))) {
      layout += (trained ? "[train]" : "[mask]") + text;
    }
    WARN(layout);
  }
}
