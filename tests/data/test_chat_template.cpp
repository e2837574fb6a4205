// Chat templates: the exact token layout and loss mask of a two-turn conversation with a system message (the whole
// text encoded once, BOS/EOS as their ids, no "▁" after them), and encode_prompt() being the very prefix training
// sees. test_builtin_chat_templates.cpp checks the ids against transformers' apply_chat_template.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "data_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/jinja_chat_template.h"

using namespace tune::data;
using tune::data::testing::mask_runs;
using tune::data::testing::tiny_tokenizer;
using Runs = std::vector<std::pair<bool, std::string>>;

namespace {
constexpr bool kMasked = false;
constexpr bool kTrained = true;

Conversation two_turns() {
  return {{{"system", "Be brief."},
           {"user", "Reverse: a b"},
           {"assistant", "b a"},
           {"user", "First and last: a b c"},
           {"assistant", "a c"}},
          "test:1"};
}

Runs layout(const std::string& name, bool train_on_prompt = false) {
  const auto example = ChatTemplate::by_name(name).encode(tiny_tokenizer(), two_turns(), train_on_prompt);
  REQUIRE(example.labels.size() == example.input_ids.size());
  for (size_t i = 0; i < example.labels.size(); ++i) {
    if (example.labels[i] != kIgnoreIndex) REQUIRE(example.labels[i] == example.input_ids[i]);
  }
  return mask_runs(tiny_tokenizer(), example);
}
}  // namespace

TEST_CASE("plain template layout and mask", "[data][template]") {
  // The reply follows "\n" in the same text, so its first token has no "▁" (it had one when encoded on its own).
  CHECK(layout("plain") == Runs{{kMasked, "<s>Be brief.\n\n### Instruction:\nReverse: a b\n\n### Response:\n"},
                                {kTrained, "b a</s>"},
                                {kMasked, "### Instruction:\nFirst and last: a b c\n\n### Response:\n"},
                                {kTrained, "a c</s>"}});
}

TEST_CASE("llama2 template layout and mask", "[data][template]") {
  // " {reply} </s>" trained whole: the reply's leading space, the space before EOS, and EOS.
  CHECK(layout("llama2") == Runs{{kMasked, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nReverse: a b [/INST]"},
                                 {kTrained, " b a </s>"},
                                 {kMasked, "<s>[INST] First and last: a b c [/INST]"},
                                 {kTrained, " a c </s>"}});
}

TEST_CASE("chatml is canonical ChatML, encoded once, replies and <|im_end|> trained", "[data][template]") {
  // The reference is the ChatML text itself (what apply_chat_template renders for a canonical ChatML template):
  // no BOS, no EOS, the whole conversation encoded once.
  const std::string canonical =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nReverse: a b<|im_end|>\n<|im_start|>assistant\n"
      "b a<|im_end|>\n<|im_start|>user\nFirst and last: a b c<|im_end|>\n<|im_start|>assistant\na c<|im_end|>\n";
  const Tokenizer& tokenizer = tiny_tokenizer();
  const auto chatml = ChatTemplate::by_name("chatml");
  const auto example = chatml.encode(tokenizer, two_turns(), false);
  CHECK(example.input_ids == tokenizer.encode(canonical, false, false));
  CHECK(std::count(example.input_ids.begin(), example.input_ids.end(), tokenizer.bos_id()) == 0);
  CHECK(std::count(example.input_ids.begin(), example.input_ids.end(), tokenizer.eos_id()) == 0);
  std::vector<std::string> trained_runs;
  for (const auto& [trained, text] : mask_runs(tokenizer, example)) {
    if (trained) trained_runs.push_back(text);
  }
  REQUIRE(trained_runs.size() == 2);
  // Each reply with the <|im_end|> that ends it (what the model must learn to produce), and nothing else.
  CHECK_THAT(trained_runs[0], Catch::EndsWith("b a<|im_end|>"));
  CHECK_THAT(trained_runs[1], Catch::EndsWith("a c<|im_end|>"));
  CHECK(trained_runs[0].find("assistant") == std::string::npos);
  CHECK(chatml.end_of_turn_text() == "<|im_end|>");
  CHECK(chatml.render_text(two_turns().messages, false) == canonical);
}

TEST_CASE("the ids are the rendered text encoded once; trained runs decode to the replies", "[data][template]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  for (const auto& name : ChatTemplate::built_in_names()) {
    INFO("template " << name);
    const auto chat_template = ChatTemplate::resolve(name, tokenizer);
    const auto example = chat_template.encode(tokenizer, two_turns(), false);
    CHECK(example.input_ids == tokenizer.encode(chat_template.render_text(two_turns().messages, false), false, false));
    std::vector<std::string> replies;
    std::vector<int64_t> run;
    for (size_t i = 0; i <= example.input_ids.size(); ++i) {
      if (i < example.input_ids.size() && example.labels[i] != kIgnoreIndex) {
        run.push_back(example.input_ids[i]);
      } else if (!run.empty()) {
        replies.push_back(tokenizer.decode(run));  // decode drops EOS and sentencepiece's leading space
        run.clear();
      }
    }
    // none: EOS after the last reply only; llama2: " {reply} </s>"; chatml: <|im_end|> is no EOS, so it shows.
    const std::string end = name == "llama2" ? " " : name == "chatml" ? "<|im_end|>" : "";
    CHECK(replies == std::vector<std::string>{"b a" + end, "a c" + end});
  }
}

TEST_CASE("train_on_prompt trains every token", "[data][template]") {
  for (const auto& name : ChatTemplate::built_in_names()) {
    const auto example = ChatTemplate::by_name(name).encode(tiny_tokenizer(), two_turns(), true);
    CHECK(example.labels == example.input_ids);
  }
}

TEST_CASE("encode_prompt is exactly the prefix training sees before each reply", "[data][template]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  for (const auto& name : ChatTemplate::built_in_names()) {
    INFO("template " << name);
    const auto chat_template = ChatTemplate::by_name(name);
    const auto full = chat_template.encode(tokenizer, two_turns(), false);
    for (size_t turns : {2u, 4u}) {  // prompt for the first and for the second reply
      Conversation prompt = two_turns();
      prompt.messages.resize(turns);
      const auto prompt_ids = chat_template.encode_prompt(tokenizer, prompt);
      REQUIRE(prompt_ids.size() < full.input_ids.size());
      CHECK(std::equal(prompt_ids.begin(), prompt_ids.end(), full.input_ids.begin()));
      CHECK(full.labels[prompt_ids.size() - 1] == kIgnoreIndex);  // the header is prompt
      CHECK(full.labels[prompt_ids.size()] != kIgnoreIndex);      // the reply starts right after it
    }
    // What generation shows: the prompt, then the reply the model would produce.
    Conversation first_turn = two_turns();
    first_turn.messages.resize(2);
    auto ids = chat_template.encode_prompt(tokenizer, first_turn);
    const auto reply = tokenizer.encode("b a", false, false);
    ids.insert(ids.end(), reply.begin(), reply.end());
    CHECK_THAT(tokenizer.decode(ids), Catch::StartsWith("Be brief.") || Catch::Contains("[INST]") ||
                                          Catch::StartsWith("<|im_start|>system"));
    CHECK_THAT(tokenizer.decode(ids), Catch::EndsWith("b a"));
  }
}

TEST_CASE("chat template errors", "[data][template]") {
  CHECK_THROWS_AS(ChatTemplate::by_name("alpaca"), tune::UsageError);
  CHECK_THROWS_WITH(ChatTemplate::by_name("alpaca"), Catch::Contains("'alpaca'") && Catch::Contains("plain, llama2, chatml"));
  const auto plain = ChatTemplate::by_name("plain");
  Conversation ends_with_user{{{"user", "u"}}, "f.jsonl:7"};
  CHECK_THROWS_WITH(plain.encode(tiny_tokenizer(), ends_with_user, false),
                    Catch::Contains("f.jsonl:7") && Catch::Contains("last message to have role 'assistant'"));
  CHECK_NOTHROW(plain.encode_prompt(tiny_tokenizer(), ends_with_user));
  Conversation two_users{{{"user", "u"}, {"user", "u"}, {"assistant", "a"}}, "f.jsonl:8"};
  CHECK_THROWS_WITH(plain.encode(tiny_tokenizer(), two_users, false), Catch::Contains("message 1 has role 'user'"));
}

TEST_CASE("the Jinja text of plain, llama2 and none renders what tune trains on", "[data][template]") {
  // Expected texts: the layouts documented in chat_template.cpp (llama2's is Hugging Face's Llama 2 chat format),
  // with BOS/EOS as their token text, as transformers renders a tokenizer_config.json chat_template.
  const std::map<std::string, std::string> expected = {
      {"plain", "<s>Be brief.\n\n### Instruction:\nReverse: a b\n\n### Response:\nb a</s>### Instruction:\n"
                "First and last: a b c\n\n### Response:\na c</s>"},
      {"llama2", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nReverse: a b [/INST] b a </s><s>[INST] First and last: "
                 "a b c [/INST] a c </s>"},
      {"none", "<s>Be brief.Reverse: a bb aFirst and last: a b ca c</s>"}};
  for (const auto& [name, text] : expected) {
    INFO("template " << name);
    const JinjaChatTemplate jinja(ChatTemplate::by_name(name).jinja_source(), name, "<s>", "</s>");
    CHECK(jinja.render(two_turns().messages, false) == text);
  }
  CHECK(ChatTemplate::by_name("chatml").jinja_source() == chatml_chat_template_source());
}
