// Jinja chat templates rendered whole and masked by prefixes (see jinja_chat_template.h).
#include "tune/data/jinja_chat_template.h"

#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/jinja/template.h"

namespace tune::data {
namespace {

jinja::Value messages_value(const std::vector<ChatMessage>& messages) {
  jinja::List list;
  for (const auto& message : messages) {
    jinja::Map entry;
    entry.set("role", jinja::Value(message.role));
    entry.set("content", jinja::Value(message.content));
    list.push_back(jinja::Value(std::move(entry)));
  }
  return jinja::Value(std::move(list));
}

// Tokens of `ids` shared with `whole` from the start: where a text cut falls in the whole text's tokens.
size_t common_prefix(const std::vector<int64_t>& ids, const std::vector<int64_t>& whole) {
  size_t n = 0;
  while (n < ids.size() && n < whole.size() && ids[n] == whole[n]) ++n;
  return n;
}

}  // namespace

JinjaChatTemplate::JinjaChatTemplate(const std::string& source, std::string name, std::string bos_token,
                                     std::string eos_token, std::string end_of_turn)
    : template_(std::make_shared<jinja::Template>(jinja::Template::parse(source, name))),
      name_(std::move(name)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      end_of_turn_(std::move(end_of_turn)) {}

std::string JinjaChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  jinja::Map context;
  context.set("messages", messages_value(messages));
  context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  context.set("bos_token", jinja::Value(bos_token_));
  context.set("eos_token", jinja::Value(eos_token_));
  return template_->render(jinja::Value(std::move(context)));
}

TokenizedExample JinjaChatTemplate::encode(const Tokenizer& tokenizer, const Conversation& conversation,
                                           bool train_on_prompt) const {
  const auto& messages = conversation.messages;
  const std::string source = conversation.source.empty() ? "conversation" : conversation.source;
  const std::string whole = render(messages, false);
  TokenizedExample example;
  example.input_ids = tokenizer.encode(whole, false, false);
  if (train_on_prompt) {
    example.labels = example.input_ids;
    return example;
  }
  example.labels.assign(example.input_ids.size(), kIgnoreIndex);
  // Where a text prefix of the whole ends, in tokens: the encodings of the prefix and of the whole part ways there.
  auto token_position = [&](size_t text_end) {
    return common_prefix(tokenizer.encode(whole.substr(0, text_end), false, false), example.input_ids);
  };
  auto fail = [&](size_t message, const char* what) {
    throw InputError(fmt::format("{}: the chat template '{}' {} for message {} ('{}'), so its tokens cannot be located "
                                 "for the loss mask; use data.train_on_prompt: true or a built-in data.template",
                                 source, name_, what, message, messages[message].role));
  };
  size_t search_from = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    // The reply starts where the conversation so far plus the generation prompt ends.
    const std::vector<ChatMessage> before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
    const std::string prompt = render(before, true);
    if (prompt.size() < search_from || whole.compare(0, prompt.size(), prompt) != 0) {
      fail(i, "does not render the conversation before it with the generation prompt as a prefix of the whole");
    }
    // It ends after its content as rendered (templates may trim it) and the end-of-turn special token right after
    // (<|eot_id|>, <|im_end|>, <end_of_turn>, </s>): what the model must learn to produce, and nothing after it.
    const std::string& content = messages[i].content;
    const size_t first = content.find_first_not_of(" \t\n\r"), last = content.find_last_not_of(" \t\n\r");
    const std::string trimmed = first == std::string::npos ? std::string() : content.substr(first, last - first + 1);
    size_t found = whole.find(content, prompt.size());
    size_t length = content.size();
    if (found == std::string::npos) {
      found = whole.find(trimmed, prompt.size());
      length = trimmed.size();
    }
    if (found == std::string::npos) fail(i, "does not render the reply's content");
    const size_t begin = token_position(prompt.size());
    size_t end = token_position(found + length);
    if (!end_of_turn_.empty() && whole.compare(found + length, end_of_turn_.size(), end_of_turn_) == 0) {
      end = token_position(found + length + end_of_turn_.size());  // however the tokenizer splits the marker
    } else if (end < example.input_ids.size() && tokenizer.is_special_token(example.input_ids[end])) {
      ++end;
    }
    for (size_t t = begin; t < end; ++t) example.labels[t] = example.input_ids[t];
    search_from = found + length;
  }
  return example;
}

std::vector<int64_t> JinjaChatTemplate::encode_prompt(const Tokenizer& tokenizer, const Conversation& conversation) const {
  return tokenizer.encode(render(conversation.messages, true), false, false);
}

const std::string& llama3_chat_template_source() {
  static const std::string source =
      "{% set loop_messages = messages %}"
      "{% for message in loop_messages %}"
      "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
      " + '<|eot_id|>' %}"
      "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
      "{{ content }}"
      "{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  return source;
}

const std::string& chatml_chat_template_source() {
  static const std::string source =
      "{% for message in messages %}"
      "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
      "{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return source;
}

}  // namespace tune::data
