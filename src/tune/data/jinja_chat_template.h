// A chat template written in Jinja (the model's own, from tokenizer_config.json, or any of tune's built-ins),
// applied as transformers' apply_chat_template does: the whole conversation is rendered to text and encoded once,
// special-token text matched as special tokens. The loss mask comes from the rendering: a reply starts where the
// conversation before it, rendered with the generation prompt, ends (that text must be a prefix of the whole: the
// template renders history stably) and ends after its content and the end-of-turn text or special token that
// follows it; a text position's place in tokens is where the encodings of the text up to it and of the whole part
// ways.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tune/data/sft_dataset.h"

namespace tune::jinja {
class Template;
}

namespace tune::data {

class JinjaChatTemplate {
 public:
  // Throws tune::InputError naming `name` (and line/column) when the source does not parse.
  // `end_of_turn`: text a reply ends with that is trained with it ("<|im_end|>" for the built-in chatml), whatever
  // the tokenizer makes of it; empty: the special token right after the reply, if there is one.
  JinjaChatTemplate(const std::string& source, std::string name, std::string bos_token, std::string eos_token,
                    std::string end_of_turn = "");

  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  TokenizedExample encode(const Tokenizer& tokenizer, const Conversation& conversation, bool train_on_prompt) const;
  std::vector<int64_t> encode_prompt(const Tokenizer& tokenizer, const Conversation& conversation) const;
  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<const jinja::Template> template_;
  std::string name_, bos_token_, eos_token_, end_of_turn_;
};

// Meta's Llama 3 chat format as a Jinja template (the built-in `llama3`), what Llama 3 Instruct's
// tokenizer_config.json ships without its tool-calling branches.
const std::string& llama3_chat_template_source();

// Canonical ChatML as a Jinja template (the built-in `chatml`): "<|im_start|>{role}\n{content}<|im_end|>\n" per
// message and "<|im_start|>assistant\n" as the generation prompt; no BOS, no EOS, no default system prompt.
const std::string& chatml_chat_template_source();

}  // namespace tune::data
