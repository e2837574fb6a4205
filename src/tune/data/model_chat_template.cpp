// Reading tokenizer_config.json's chat_template (see model_chat_template.h).
#include "tune/data/model_chat_template.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "tune/core/error.h"

namespace tune::data {

std::optional<ModelChatTemplate> model_chat_template(const Tokenizer& tokenizer) {
  const auto path = tokenizer.model_path().parent_path() / "tokenizer_config.json";
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(path, ignored)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), error.what()));
  }
  const auto found = config.find("chat_template");
  if (found == config.end() || found->is_null()) return std::nullopt;
  const std::string name = path.string() + " chat_template";
  const auto built_in = config.find(kTuneChatTemplateKey);
  const std::string tune_built_in = built_in != config.end() && built_in->is_string() ? built_in->get<std::string>() : "";
  if (found->is_string()) return ModelChatTemplate{found->get<std::string>(), name, tune_built_in};
  if (found->is_array()) {
    for (const auto& entry : *found) {
      if (entry.value("name", std::string()) == "default") {
        return ModelChatTemplate{entry.at("template").get<std::string>(), name + " 'default'", tune_built_in};
      }
    }
  }
  throw InputError(fmt::format("{}: chat_template must be a string or a list holding a 'default' entry", path.string()));
}

}  // namespace tune::data
