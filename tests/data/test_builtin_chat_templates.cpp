// The built-ins plain, llama2 and none against transformers: the ids training sees equal apply_chat_template's on
// the Jinja text an export writes, with the same tokenizer (Llama 2's tokenizer.json and a sentencepiece
// tokenizer.model); the trained tokens are exactly those of each assistant turn (reply and EOS) by character
// offsets; encode_prompt() equals apply_chat_template(..., add_generation_prompt=True).
// Fixtures: scripts/make_builtin_template_fixtures.py (a CTest setup fixture).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"

using namespace tune::data;

namespace {

nlohmann::json load_fixtures() {
  std::ifstream in(TUNE_BUILTIN_TEMPLATE_FIXTURES);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

std::string show(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

}  // namespace

TEST_CASE("built-in plain, llama2 and none: training ids and mask equal transformers' apply_chat_template",
          "[data][template][hf]") {
  const nlohmann::json fixtures = load_fixtures();
  for (const auto& [name, source] : fixtures["templates"].items()) {
    INFO("template " << name);
    CHECK(ChatTemplate::by_name(name).jinja_source() == source.get<std::string>());  // what an export writes
  }
  for (const auto& [kind, entry] : fixtures["tokenizers"].items()) {
    if (entry.contains("unavailable")) {
      WARN("SKIPPED: " << kind << " tokenizer unavailable (" << entry["unavailable"].get<std::string>()
                       << "): built-in templates NOT checked against transformers for it");
      continue;
    }
    const auto tokenizer = Tokenizer::load(entry["file"].get<std::string>());
    int64_t cases = 0, ids_compared = 0, id_mismatches = 0, mask_mismatches = 0, prompt_ids_compared = 0;
    for (const auto& row : entry["cases"]) {
      const std::string name = row["template"].get<std::string>();
      INFO(kind << " template " << name << " case " << cases);
      ++cases;
      const auto chat = ChatTemplate::resolve(name, tokenizer);
      Conversation conversation;
      for (const auto& message : row["messages"]) {
        conversation.messages.push_back({message["role"].get<std::string>(), message["content"].get<std::string>()});
      }
      CHECK(chat.render_text(conversation.messages, false) == row["text"].get<std::string>());
      const auto want = row["ids"].get<std::vector<int64_t>>();
      const auto trained = row["trained"].get<std::vector<bool>>();
      const auto example = chat.encode(tokenizer, conversation, false);
      ids_compared += static_cast<int64_t>(want.size());
      if (example.input_ids != want) {
        ++id_mismatches;
        UNSCOPED_INFO("tune: " << show(example.input_ids) << "\nhf:   " << show(want));
      } else {
        for (size_t t = 0; t < want.size(); ++t) {
          const bool tune_trained = example.labels[t] != kIgnoreIndex;
          if (tune_trained != trained[t]) {
            ++mask_mismatches;
            std::cout << kind << " " << name << " case " << cases - 1 << ": mask differs at token " << t << " ("
                      << tokenizer.piece(want[t]) << ")\n";
          }
          if (tune_trained) CHECK(example.labels[t] == example.input_ids[t]);
        }
      }
      // The EOS closing each reply is trained (none: the last reply's only).
      CHECK(std::count(trained.begin(), trained.end(), true) > 0);
      CHECK(example.labels.back() == tokenizer.eos_id());
      CHECK(chat.encode(tokenizer, conversation, true).labels == want);  // train_on_prompt: every token
      for (const auto& prompt : row["prompts"]) {
        Conversation before = conversation;
        before.messages.resize(prompt["messages"].get<size_t>());
        const auto prompt_want = prompt["ids"].get<std::vector<int64_t>>();
        prompt_ids_compared += static_cast<int64_t>(prompt_want.size());
        CHECK(chat.encode_prompt(tokenizer, before) == prompt_want);
      }
    }
    CHECK(id_mismatches == 0);
    CHECK(mask_mismatches == 0);
    std::cout << kind << ": " << cases << " conversations, " << ids_compared << " training ids and "
              << prompt_ids_compared << " prompt ids compared with transformers; " << id_mismatches
              << " conversations with differing ids, " << mask_mismatches << " mask differences\n";
  }
}
