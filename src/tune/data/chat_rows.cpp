// Chat rows: {"messages": [{"role", "content"}, ...]} with roles system, user, assistant; and the turn order that
// chat and ShareGPT rows share.
#include <fmt/format.h>

#include "tune/data/sft_rows.h"

namespace tune::data::rows {

void check_turn_order(const std::vector<ChatMessage>& messages, const std::string& list,
                      const std::function<std::string(size_t)>& name_of) {
  bool has_assistant = false;
  for (const auto& message : messages) has_assistant = has_assistant || message.role == "assistant";
  if (!has_assistant) throw BadRow{fmt::format("{} contain no assistant turn, so nothing would be trained", list)};
  if (messages.back().role != "assistant") {
    throw BadRow{fmt::format("{} end with a {} turn; the last message must be the assistant's reply", list,
                             messages.back().role)};
  }
  const size_t first_turn = messages.front().role == "system" ? 1 : 0;
  for (size_t i = first_turn; i < messages.size(); ++i) {
    const char* expected = (i - first_turn) % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != expected) {
      throw BadRow{fmt::format("{} where '{}' was expected (an optional system message first, then user and "
                               "assistant alternating)",
                               name_of(i), expected)};
    }
  }
}

std::vector<ChatMessage> message_list(const nlohmann::json& list, const std::string& field) {
  if (!list.is_array()) throw BadRow{fmt::format("field '{}' must be an array, got {}", field, list.type_name())};
  if (list.empty()) throw BadRow{fmt::format("field '{}' is empty", field)};
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& message = list[i];
    const std::string where = fmt::format("{}[{}]", field, i);
    if (!message.is_object()) throw BadRow{fmt::format("{} must be an object, got {}", where, message.type_name())};
    const std::string what = "each message needs 'role' and 'content'";
    std::string role, content;
    try {
      role = string_field(message, "role", true, what);
      content = string_field(message, "content", true, what);
    } catch (const BadRow& bad) {
      throw BadRow{where + ": " + bad.reason};
    }
    if (role != "system" && role != "user" && role != "assistant") {
      throw BadRow{fmt::format("{}.role '{}' is not one of system, user, assistant", where, role)};
    }
    messages.push_back({role, content});
  }
  return messages;
}

std::vector<ChatMessage> chat_messages(const nlohmann::json& row) {
  const auto found = row.find("messages");
  if (found == row.end()) throw BadRow{"missing field 'messages' (chat rows need messages: [{role, content}, ...])"};
  std::vector<ChatMessage> messages = message_list(*found, "messages");
  check_turn_order(messages, "messages",
                   [&](size_t i) { return fmt::format("messages[{}].role is '{}'", i, messages[i].role); });
  return messages;
}

}  // namespace tune::data::rows
