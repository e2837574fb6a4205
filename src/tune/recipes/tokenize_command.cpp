// tune tokenize: how a model's tokenizer and chat template see a text or a conversation (ids and pieces), the
// debugging aid users of tokenizer.json files reach for; also how tune's tokenization is checked from outside.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "tune/core/error.h"
#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"
#include "tune/recipes/commands.h"

namespace tune::recipes {
namespace {

// A JSON file holding a list of {role, content}, or an object with such a list under "messages".
std::vector<data::ChatMessage> read_messages(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("--messages {}: cannot be opened", path.string()));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), error.what()));
  }
  const nlohmann::json& list = json.is_object() && json.contains("messages") ? json["messages"] : json;
  if (!list.is_array() || list.empty()) {
    throw InputError(fmt::format("{}: expected a non-empty list of {{\"role\", \"content\"}} messages (or an object "
                                 "with one under \"messages\")",
                                 path.string()));
  }
  std::vector<data::ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& message = list[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string() ||
        !message.contains("content") || !message["content"].is_string()) {
      throw InputError(fmt::format("{}: message {} needs string fields \"role\" and \"content\"", path.string(), i));
    }
    messages.push_back({message["role"].get<std::string>(), message["content"].get<std::string>()});
  }
  return messages;
}

}  // namespace

int run_tokenize(const TokenizeArguments& arguments) {
  if (arguments.text.has_value() == arguments.messages.has_value()) {
    throw UsageError("tune tokenize: give exactly one of --text and --messages");
  }
  const auto tokenizer = data::Tokenizer::load(arguments.target);
  std::string text;
  std::vector<int64_t> ids;
  std::string template_name;
  if (arguments.text) {
    text = *arguments.text;
    ids = tokenizer.encode(text, !arguments.no_special, false);
  } else {
    const auto messages = read_messages(*arguments.messages);
    const auto chat = data::ChatTemplate::resolve(arguments.chat_template, tokenizer);
    template_name = chat.name();
    if (chat.is_jinja()) {
      text = chat.render_text(messages, arguments.add_generation_prompt);
      ids = tokenizer.encode(text, false, false);
    } else {
      data::Conversation conversation{messages, arguments.messages->string()};
      ids = arguments.add_generation_prompt ? chat.encode_prompt(tokenizer, conversation)
                                            : chat.encode(tokenizer, conversation, true).input_ids;
      text = tokenizer.decode(ids);  // the part-based built-ins have no single text; this is what the ids spell
    }
  }
  std::vector<std::string> pieces;
  for (int64_t id : ids) pieces.push_back(tokenizer.piece(id));
  if (arguments.json) {
    nlohmann::json out{{"text", text}, {"ids", ids}, {"pieces", pieces}, {"tokens", ids.size()},
                       {"tokenizer", tokenizer.model_path().string()}};
    if (!template_name.empty()) out["template"] = template_name;
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::cout << fmt::format("{} tokens ({}{})\n", ids.size(), tokenizer.model_path().string(),
                           template_name.empty() ? "" : ", chat template " + template_name);
  if (arguments.messages) std::cout << "--- text ---\n" << text << "\n--- tokens ---\n";
  for (size_t i = 0; i < ids.size(); ++i) {
    std::cout << fmt::format("{:>6} {:>8}  {}\n", i, ids[i], nlohmann::json(pieces[i]).dump());
  }
  return 0;
}

}  // namespace tune::recipes
