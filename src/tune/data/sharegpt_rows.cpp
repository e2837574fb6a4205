// ShareGPT rows: {"conversations": [{"from", "value"}, ...], "system"?}. Dumps spell the roles human/gpt/system
// (the original ShareGPT export) or user/assistant (many re-exports); both map onto chat roles. Other speakers
// (tool calls, observations, "bing") have no place in the chat templates, so they are errors, not guesses.
#include <fmt/format.h>

#include "tune/data/sft_rows.h"

namespace tune::data::rows {

namespace {

const char* chat_role(const std::string& from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant") return "assistant";
  if (from == "system") return "system";
  return nullptr;
}

}  // namespace

std::vector<ChatMessage> sharegpt_messages(const nlohmann::json& row) {
  const auto found = row.find("conversations");
  if (found == row.end()) {
    throw BadRow{"missing field 'conversations' (ShareGPT rows need conversations: [{from, value}, ...])"};
  }
  if (!found->is_array()) {
    throw BadRow{fmt::format("field 'conversations' must be an array, got {}", found->type_name())};
  }
  if (found->empty()) throw BadRow{"field 'conversations' is empty"};
  // Some exports (LLaMA-Factory's sharegpt layout) keep the system prompt beside the turns.
  const std::string system = string_field(row, "system", false, "an optional system prompt");
  std::vector<ChatMessage> messages;
  std::vector<std::string> spelled;  // each message's `from` as written, for messages about it
  if (!system.empty()) {
    messages.push_back({"system", system});
    spelled.push_back("");
  }
  for (size_t i = 0; i < found->size(); ++i) {
    const nlohmann::json& turn = (*found)[i];
    const std::string where = fmt::format("conversations[{}]", i);
    if (!turn.is_object()) throw BadRow{fmt::format("{} must be an object, got {}", where, turn.type_name())};
    const std::string what = "each turn needs 'from' and 'value'";
    std::string from, value;
    try {
      from = string_field(turn, "from", true, what);
      value = string_field(turn, "value", true, what);
    } catch (const BadRow& bad) {
      throw BadRow{where + ": " + bad.reason};
    }
    const char* role = chat_role(from);
    if (role == nullptr) {
      throw BadRow{fmt::format("{}.from '{}' is not one of human, gpt, system (or user, assistant)", where, from)};
    }
    if (role == std::string("system") && !system.empty()) {
      throw BadRow{fmt::format("{} is a system turn, but the row's 'system' field gives one too; keep one", where)};
    }
    messages.push_back({role, value});
    spelled.push_back(from);
  }
  const size_t offset = system.empty() ? 0 : 1;
  check_turn_order(messages, "conversations", [&](size_t i) {
    if (i < offset) return std::string("the row's 'system' field");
    return fmt::format("conversations[{}].from is '{}' ({})", i - offset, spelled[i], messages[i].role);
  });
  return messages;
}

}  // namespace tune::data::rows
