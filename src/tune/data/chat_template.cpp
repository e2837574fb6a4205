// Chat templates: every built-in is Jinja text (plain, llama2 and none here; chatml and llama3 in
// jinja_chat_template.cpp) rendered whole and encoded once, special-token text matched as special tokens, as
// transformers' apply_chat_template does: training, `tune infer` and any tool reading an export's
// tokenizer_config.json see the same ids. The loss mask comes from prefix renderings (jinja_chat_template.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/data/jinja_chat_template.h"
#include "tune/data/model_chat_template.h"
#include "tune/data/sft_dataset.h"

namespace tune::data {
namespace {

// plain: "<s>{system}\n\n### Instruction:\n{user}\n\n### Response:\n{reply}</s>", BOS only at the start.
const char* const kPlainJinja =
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '### Instruction:\\n' + message['content'] + '\\n\\n### Response:\\n' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}";

// llama2: Hugging Face's Llama 2 chat template layout, "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]
// {reply} </s>" per turn (the system block in the first turn only; contents as given, not stripped).
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

// none (base models, completion-style data): the contents back to back between BOS and (after a final reply) EOS,
// encoded whole like raw text. A reply whose first token merges with the text before it is trained from that token.
const char* const kNoneJinja =
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
    "{% if messages and messages[-1]['role'] == 'assistant' %}{{ eos_token }}{% endif %}";

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
  // Without a tokenizer, BOS and EOS are written "<s>" and "</s>" (sentencepiece's and Llama 2's); resolve() uses
  // the tokenizer's own. ChatML's text holds neither.
  return built_in_template(name, "<s>", "</s>");
}

ChatTemplate ChatTemplate::built_in_template(const std::string& name, const std::string& bos, const std::string& eos) {
  ChatTemplate chat(name);
  std::string end_of_turn = eos;  // the EOS after each reply is trained with it
  if (name == "chatml") {
    chat.source_ = chatml_chat_template_source();
    end_of_turn = chat.end_of_turn_text();
  } else if (name == "llama3") {
    chat.source_ = llama3_chat_template_source();
    end_of_turn = "";  // <|eot_id|>, the special token right after the reply
  } else {
    chat.source_ = name == "plain" ? kPlainJinja : name == "llama2" ? kLlama2Jinja : kNoneJinja;
    if (name == "llama2") end_of_turn = " " + eos;  // " {reply} </s>": the space before EOS is the reply's too
  }
  chat.jinja_ = std::make_shared<JinjaChatTemplate>(*chat.source_, name, bos, eos, end_of_turn);
  return chat;
}

ChatTemplate ChatTemplate::resolve(const std::string& name, const Tokenizer& tokenizer) {
  const auto token_text = [&](int64_t id) { return id >= 0 ? tokenizer.piece(id) : std::string(); };
  if (name == "plain" || name == "llama2" || name == "none") {
    if (tokenizer.eos_id() < 0) {
      throw InputError(fmt::format("tokenizer '{}' has no EOS token; the chat template '{}' ends every reply with one",
                                   tokenizer.model_path().string(), name));
    }
    return built_in_template(name, token_text(tokenizer.bos_id()), token_text(tokenizer.eos_id()));
  }
  if (name == "llama3") return built_in_template(name, token_text(tokenizer.bos_id()), token_text(tokenizer.eos_id()));
  if (name != "auto") return by_name(name);
  const auto config = model_chat_template(tokenizer);
  if (!config) return resolve("plain", tokenizer);
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

std::string ChatTemplate::jinja_source() const { return *source_; }

std::string ChatTemplate::end_of_turn_text() const {
  if (name_ == "chatml") return "<|im_end|>";
  if (name_ == "llama3") return "<|eot_id|>";
  return "";
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return jinja_->render(messages, add_generation_prompt);
}

TokenizedExample ChatTemplate::encode(const Tokenizer& tokenizer, const Conversation& conversation,
                                      bool train_on_prompt) const {
  check_turns(conversation, "assistant", "chat template encode()");
  return jinja_->encode(tokenizer, conversation, train_on_prompt);
}

std::vector<int64_t> ChatTemplate::encode_prompt(const Tokenizer& tokenizer, const Conversation& conversation) const {
  check_turns(conversation, "user", "chat template encode_prompt()");
  return jinja_->encode_prompt(tokenizer, conversation);
}

}  // namespace tune::data
