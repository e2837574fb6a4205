// tune's interpreter for Hugging Face chat templates: the subset of Jinja2 that `tokenizer_config.json`'s
// `chat_template` uses, rendered byte for byte as transformers' apply_chat_template renders it (jinja2's sandbox
// with trim_blocks, lstrip_blocks, loop controls, and the globals raise_exception, strftime_now and namespace).
//
//   auto chat = Template::parse(config["chat_template"], "Qwen3 chat template");
//   Map context;
//   context.set("messages", from_json(messages_json));
//   context.set("add_generation_prompt", true);
//   std::string prompt = chat.render(Value(context));
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tune/jinja/json_bridge.h"
#include "tune/jinja/value.h"

namespace tune::jinja {

struct Statement;

struct RenderOptions {
  // What `strftime_now(format)` returns; empty means the current local time, as in transformers. Tests and
  // reproducible data pipelines fix it.
  std::function<std::string(const std::string& format)> strftime_now;
};

class Template {
 public:
  // Throws tune::InputError naming `name`, the line and the column, and what was expected, for a syntax error or
  // an unsupported tag.
  static Template parse(const std::string& source, const std::string& name);

  // `context` is a map of the template's variables. Throws tune::InputError for an evaluation error (with the
  // template name, line and column) and for `raise_exception(message)` (with the template's message).
  std::string render(const Value& context, const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  Template(std::string name, std::shared_ptr<const std::vector<Statement>> body)
      : name_(std::move(name)), body_(std::move(body)) {}

  std::string name_;
  std::shared_ptr<const std::vector<Statement>> body_;
};

}  // namespace tune::jinja
