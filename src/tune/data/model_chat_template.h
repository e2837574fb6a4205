// The model's own chat template: tokenizer_config.json's "chat_template" beside the tokenizer file (a string, or
// a list of {name, template} from which "default" is taken, as transformers does).
#pragma once

#include <optional>
#include <string>

#include "tune/data/tokenizer.h"

namespace tune::data {

struct ModelChatTemplate {
  std::string source;
  std::string name;  // "<path>/tokenizer_config.json chat_template", for error messages
  // tokenizer_config.json's "tune_chat_template": the built-in a model exported by `tune export` was trained with.
  // Its `source` is then the Jinja text equivalent written for other tools; tune uses the built-in itself, which
  // tokenizes exactly as training did.
  std::string tune_built_in;
};

// The tokenizer_config.json key naming that built-in.
inline constexpr const char* kTuneChatTemplateKey = "tune_chat_template";

// nullopt when there is no tokenizer_config.json or it has no chat_template; throws tune::InputError naming the file
// when it is not valid JSON or the field has an unexpected shape.
std::optional<ModelChatTemplate> model_chat_template(const Tokenizer& tokenizer);

}  // namespace tune::data
