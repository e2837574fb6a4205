// Chat templates: a conversation rendered as text parts (prompt or trained) plus BOS/EOS, then tokenized (plain,
// llama2, none); the Jinja ones (chatml, llama3, the model's own) are rendered whole (jinja_chat_template.h).
//
// Tokenization rule (the sentencepiece subtlety): every run of text between a mask boundary or a BOS/EOS is
// encoded as its own string and the ids are concatenated, as Meta's Llama 2 reference code does. That keeps
// label boundaries exact, but sentencepiece prefixes each separately encoded string with "▁" (a space), so a
// part that would begin with a space in the joined text leaves it out and lets that prefix supply it (llama2's
// " {reply} " is written "{reply} "). encode_prompt() renders the same parts up to the assistant header, so its
// ids are exactly the prefix encode() trains on, and decode(prompt ids) + " " + reply reads as the full text.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/data/jinja_chat_template.h"
#include "tune/data/model_chat_template.h"
#include "tune/data/sft_dataset.h"

namespace tune::data {
namespace {

struct TemplatePart {
  enum class Kind { text, bos, eos } kind;
  std::string text;
  bool trained;
};

// Collects parts; adjacent text of the same mask joins, so each run is encoded once.
class Rendering {
 public:
  void text(const std::string& text, bool trained) {
    if (!parts_.empty() && parts_.back().kind == TemplatePart::Kind::text && parts_.back().trained == trained) {
      parts_.back().text += text;
    } else {
      parts_.push_back({TemplatePart::Kind::text, text, trained});
    }
  }
  void bos(bool trained) { parts_.push_back({TemplatePart::Kind::bos, "", trained}); }
  void eos(bool trained) { parts_.push_back({TemplatePart::Kind::eos, "", trained}); }
  const std::vector<TemplatePart>& parts() const { return parts_; }

 private:
  std::vector<TemplatePart> parts_;
};

constexpr bool kPrompt = false;
constexpr bool kTrained = true;

// "{system}\n\n### Instruction:\n{user}\n\n### Response:\n{reply}</s>"; BOS only at the start.
void render_plain(const std::vector<ChatMessage>& messages, Rendering& out) {
  out.bos(kPrompt);
  std::string system_prefix;
  for (const auto& message : messages) {
    if (message.role == "system") {
      system_prefix = message.content + "\n\n";
    } else if (message.role == "user") {
      out.text(system_prefix + "### Instruction:\n" + message.content + "\n\n### Response:\n", kPrompt);
      system_prefix.clear();
    } else {
      out.text(message.content, kTrained);
      out.eos(kTrained);
    }
  }
}

// plain as Jinja, for other tools (tokenizer_config.json of an export): the same text, BOS and EOS as their token
// text. tune itself keeps encoding plain part by part (see the top of this file).
const char* const kPlainJinja =
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '### Instruction:\\n' + message['content'] + '\\n\\n### Response:\\n' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}";

// Meta's Llama 2 chat format: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {reply} </s>" per turn.
void render_llama2(const std::vector<ChatMessage>& messages, Rendering& out) {
  std::string system_block;
  for (const auto& message : messages) {
    if (message.role == "system") {
      system_block = "<<SYS>>\n" + message.content + "\n<</SYS>>\n\n";
    } else if (message.role == "user") {
      out.bos(kPrompt);
      out.text("[INST] " + system_block + message.content + " [/INST]", kPrompt);
      system_block.clear();
    } else {
      out.text(message.content + " ", kTrained);  // the leading space comes from sentencepiece's prefix
      out.eos(kTrained);
    }
  }
}

// llama2 as Jinja (the layout of Hugging Face's Llama 2 chat template): the reply's spaces are written out, as
// sentencepiece's prefix supplies the leading one when tune encodes the reply on its own.
const char* const kLlama2Jinja =
    "{% if messages[0]['role'] == 'system' %}{% set system_block = '<<SYS>>\\n' + messages[0]['content'] + "
    "'\\n<</SYS>>\\n\\n' %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set system_block = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + (system_block if loop.index0 == 0 else '') + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}";

// Templates assume an optional system message, then user/assistant alternating; read_jsonl guarantees it for
// files, this guards conversations built in code. ends_with: the role the last message must have.
void check_turns(const Conversation& conversation, const char* ends_with, const char* caller) {
  const auto& messages = conversation.messages;
  const std::string source = conversation.source.empty() ? "conversation" : conversation.source;
  const size_t first_turn = !messages.empty() && messages.front().role == "system" ? 1 : 0;
  if (messages.size() <= first_turn || messages.back().role != ends_with) {
    throw InputError(fmt::format("{}: {} needs the last message to have role '{}' (after at least one turn), got {}",
                                 source, caller, ends_with,
                                 messages.empty() ? "no messages" : "'" + messages.back().role + "' last"));
  }
  for (size_t i = first_turn; i < messages.size(); ++i) {
    const char* expected = (i - first_turn) % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != expected) {
      throw InputError(fmt::format("{}: message {} has role '{}' where '{}' was expected (an optional system "
                                   "message, then user and assistant alternating)",
                                   source, i, messages[i].role, expected));
    }
  }
}

// "none": the contents back to back, BOS first; the assistant's contents trained, EOS after the last message.
void render_none(const std::vector<ChatMessage>& messages, Rendering& out) {
  out.bos(kPrompt);
  for (const auto& message : messages) out.text(message.content, message.role == "assistant" ? kTrained : kPrompt);
  if (!messages.empty() && messages.back().role == "assistant") out.eos(kTrained);
}

// none as Jinja: the contents back to back between BOS and (after a final reply) EOS.
const char* const kNoneJinja =
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
    "{% if messages and messages[-1]['role'] == 'assistant' %}{{ eos_token }}{% endif %}";

Rendering render(const std::string& name, const std::vector<ChatMessage>& messages) {
  Rendering rendering;
  if (name == "none") render_none(messages, rendering);
  if (name == "plain") render_plain(messages, rendering);
  if (name == "llama2") render_llama2(messages, rendering);
  return rendering;
}

TokenizedExample tokenize(const Tokenizer& tokenizer, const Rendering& rendering, bool train_on_prompt) {
  if (tokenizer.eos_id() < 0) {
    throw InputError(fmt::format("tokenizer '{}' has no EOS token; chat templates end every reply with one",
                                 tokenizer.model_path().string()));
  }
  TokenizedExample example;
  for (const auto& part : rendering.parts()) {
    std::vector<int64_t> ids;
    if (part.kind == TemplatePart::Kind::text) ids = tokenizer.encode(part.text, false, false);
    if (part.kind == TemplatePart::Kind::bos && tokenizer.bos_id() >= 0) ids = {tokenizer.bos_id()};
    if (part.kind == TemplatePart::Kind::eos) ids = {tokenizer.eos_id()};
    const bool trained = part.trained || train_on_prompt;
    example.input_ids.insert(example.input_ids.end(), ids.begin(), ids.end());
    for (int64_t id : ids) example.labels.push_back(trained ? id : kIgnoreIndex);
  }
  return example;
}

}  // namespace

std::vector<std::string> ChatTemplate::names() { return {"auto", "plain", "llama2", "chatml", "llama3", "none"}; }

std::vector<std::string> ChatTemplate::built_in_names() { return {"plain", "llama2", "chatml", "none"}; }

ChatTemplate ChatTemplate::by_name(const std::string& name) {
  const std::vector<std::string> built_in = built_in_names();
  if (std::find(built_in.begin(), built_in.end(), name) == built_in.end()) {
    throw UsageError(fmt::format("unknown chat template '{}' (or one that needs the tokenizer: auto, llama3); valid "
                                 "built-in templates: {}",
                                 name, fmt::join(built_in, ", ")));
  }
  ChatTemplate chat(name);
  // ChatML is rendered whole and encoded once, as apply_chat_template does (its text holds no BOS or EOS, so it
  // needs no tokenizer to build).
  if (name == "chatml") {
    chat.source_ = chatml_chat_template_source();
    chat.jinja_ = std::make_shared<JinjaChatTemplate>(*chat.source_, "chatml", "", "", chat.end_of_turn_text());
  }
  return chat;
}

ChatTemplate ChatTemplate::resolve(const std::string& name, const Tokenizer& tokenizer) {
  const auto token_text = [&](int64_t id) { return id >= 0 ? tokenizer.piece(id) : std::string(); };
  if (name == "llama3") {
    ChatTemplate chat("llama3");
    chat.source_ = llama3_chat_template_source();
    chat.jinja_ = std::make_shared<JinjaChatTemplate>(*chat.source_, "llama3",
                                                      token_text(tokenizer.bos_id()), token_text(tokenizer.eos_id()));
    return chat;
  }
  if (name != "auto") return by_name(name);
  const auto config = model_chat_template(tokenizer);
  if (!config) return by_name("plain");
  if (!config->tune_built_in.empty()) {
    const auto all = names();
    if (config->tune_built_in == "auto" || std::find(all.begin(), all.end(), config->tune_built_in) == all.end()) {
      throw InputError(fmt::format("{}: {} is '{}'; expected one of tune's built-in templates ({})", config->name,
                                   kTuneChatTemplateKey, config->tune_built_in, fmt::join(built_in_names(), ", ")));
    }
    return resolve(config->tune_built_in, tokenizer);  // what the model was trained with, token for token
  }
  ChatTemplate chat("auto");
  chat.source_ = config->source;
  chat.jinja_ = std::make_shared<JinjaChatTemplate>(config->source, config->name, token_text(tokenizer.bos_id()),
                                                    token_text(tokenizer.eos_id()));
  return chat;
}

std::string ChatTemplate::jinja_source() const {
  if (source_) return *source_;
  if (name_ == "plain") return kPlainJinja;
  if (name_ == "llama2") return kLlama2Jinja;
  return kNoneJinja;
}

std::string ChatTemplate::end_of_turn_text() const {
  if (name_ == "chatml") return "<|im_end|>";
  if (name_ == "llama3") return "<|eot_id|>";
  return "";
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return jinja_ ? jinja_->render(messages, add_generation_prompt) : std::string();
}

TokenizedExample ChatTemplate::encode(const Tokenizer& tokenizer, const Conversation& conversation,
                                      bool train_on_prompt) const {
  check_turns(conversation, "assistant", "chat template encode()");
  if (jinja_) return jinja_->encode(tokenizer, conversation, train_on_prompt);
  return tokenize(tokenizer, render(name_, conversation.messages), train_on_prompt);
}

std::vector<int64_t> ChatTemplate::encode_prompt(const Tokenizer& tokenizer, const Conversation& conversation) const {
  check_turns(conversation, "user", "chat template encode_prompt()");
  if (jinja_) return jinja_->encode_prompt(tokenizer, conversation);
  return tokenize(tokenizer, render(name_, conversation.messages), false).input_ids;
}

}  // namespace tune::data
