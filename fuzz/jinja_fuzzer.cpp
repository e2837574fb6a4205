// A chat template (tokenizer_config.json's chat_template): jinja::Template::parse, then render with the variables
// apply_chat_template passes. The input is "template [SEP messages]", SEP being kSeparator on a line of its own and
// messages a JSON list that replaces the default conversation; a plain template (the seeds) is a valid input.
#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "tune/jinja/template.h"

namespace {

using tune::jinja::Map;
using tune::jinja::Value;

constexpr std::string_view kSeparator = "\n#messages#\n";

const nlohmann::ordered_json& default_messages() {
  static const auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi <b>&amp;</b> \"quoted\" 😀"},
    {"role": "assistant", "content": "Hello.", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
    {"role": "tool", "content": "{\"ok\": true}"},
    {"role": "user", "content": ""}])");
  return messages;
}

Value context(const nlohmann::ordered_json& messages, bool add_generation_prompt) {
  Map map;
  map.set("messages", tune::jinja::from_json(messages));
  map.set("bos_token", Value("<s>"));
  map.set("eos_token", Value("</s>"));
  map.set("add_generation_prompt", Value(add_generation_prompt));
  map.set("tools", Value());
  map.set("documents", Value());
  return Value(map);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = tune::fuzz::split(tune::fuzz::as_text(data, size), kSeparator);
  nlohmann::ordered_json messages = default_messages();
  if (parts.size() > 1) {
    auto given = nlohmann::ordered_json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
    if (!given.is_discarded()) messages = std::move(given);
  }
  tune::fuzz::expect_input_errors([&] {
    const auto chat = tune::jinja::Template::parse(std::string(parts[0]), "fuzz template");
    tune::fuzz::expect_input_errors([&] { (void)chat.render(context(messages, true)); });
    (void)chat.render(context(messages, false));
  });
  return 0;
}
