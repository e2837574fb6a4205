// Reading SFT JSONL files into conversations, with errors that name file:line and the problem.
#include "tune/data/sft_dataset.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/core/log.h"

namespace tune::data {
namespace {

using nlohmann::json;

// A problem with one line; read_jsonl prefixes file:line and decides between failing and skipping.
struct BadLine {
  std::string reason;
};

const char* const kInstructionFields = "instruction rows need 'instruction' and 'output' (optional: 'input', 'system')";

std::string field_names(const json& row) {
  std::string names;
  for (const auto& item : row.items()) names += (names.empty() ? "'" : ", '") + item.key() + "'";
  return names.empty() ? "none" : names;
}

// The string at row[field]; absent (or null when optional) gives "".
std::string string_field(const json& row, const std::string& field, bool required, const std::string& what) {
  const auto found = row.find(field);
  if (found == row.end() || (!required && found->is_null())) {
    if (required) throw BadLine{fmt::format("missing field '{}' ({})", field, what)};
    return "";
  }
  if (!found->is_string()) {
    throw BadLine{fmt::format("field '{}' must be a string, got {}", field, found->type_name())};
  }
  return found->get<std::string>();
}

std::vector<ChatMessage> instruction_messages(const json& row) {
  std::vector<ChatMessage> messages;
  const std::string system = string_field(row, "system", false, kInstructionFields);
  const std::string instruction = string_field(row, "instruction", true, kInstructionFields);
  const std::string input = string_field(row, "input", false, kInstructionFields);
  const std::string output = string_field(row, "output", true, kInstructionFields);
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", input.empty() ? instruction : instruction + "\n\n" + input});
  messages.push_back({"assistant", output});
  return messages;
}

// Chat rows: an optional system message, then user and assistant alternating, ending with the assistant
// (every template renders turns as user/assistant pairs, and the last reply is what carries the loss).
std::vector<ChatMessage> chat_messages(const json& row) {
  const auto found = row.find("messages");
  if (found == row.end()) throw BadLine{"missing field 'messages' (chat rows need messages: [{role, content}, ...])"};
  if (!found->is_array()) throw BadLine{fmt::format("field 'messages' must be an array, got {}", found->type_name())};
  if (found->empty()) throw BadLine{"field 'messages' is empty"};
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < found->size(); ++i) {
    const json& message = (*found)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!message.is_object()) throw BadLine{fmt::format("{} must be an object, got {}", where, message.type_name())};
    const std::string what = "each message needs 'role' and 'content'";
    std::string role, content;
    try {
      role = string_field(message, "role", true, what);
      content = string_field(message, "content", true, what);
    } catch (const BadLine& bad) {
      throw BadLine{where + ": " + bad.reason};
    }
    if (role != "system" && role != "user" && role != "assistant") {
      throw BadLine{fmt::format("{}.role '{}' is not one of system, user, assistant", where, role)};
    }
    messages.push_back({role, content});
  }
  bool has_assistant = false;
  for (const auto& message : messages) has_assistant = has_assistant || message.role == "assistant";
  if (!has_assistant) throw BadLine{"messages contain no assistant turn, so nothing would be trained"};
  if (messages.back().role != "assistant") {
    throw BadLine{fmt::format("messages end with a {} turn; the last message must be the assistant's reply",
                              messages.back().role)};
  }
  const size_t first_turn = messages.front().role == "system" ? 1 : 0;
  for (size_t i = first_turn; i < messages.size(); ++i) {
    const char* expected = (i - first_turn) % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != expected) {
      throw BadLine{fmt::format("messages[{}].role is '{}' where '{}' was expected (an optional system message "
                                "first, then user and assistant alternating)",
                                i, messages[i].role, expected)};
    }
  }
  return messages;
}

std::vector<ChatMessage> parse_line(const std::string& line, DataFormat format) {
  json row;
  try {
    row = json::parse(line);
  } catch (const json::parse_error& error) {
    throw BadLine{fmt::format("malformed JSON: {}", error.what())};
  }
  if (!row.is_object()) throw BadLine{fmt::format("each line must be a JSON object, got {}", row.type_name())};
  if (format == DataFormat::automatic) {
    if (row.contains("messages")) {
      format = DataFormat::chat;
    } else if (row.contains("instruction") || row.contains("output")) {
      format = DataFormat::instruction;
    } else {
      throw BadLine{fmt::format("neither 'messages' (chat format) nor 'instruction'/'output' (instruction format) "
                                "present; fields: {}",
                                field_names(row))};
    }
  }
  return format == DataFormat::chat ? chat_messages(row) : instruction_messages(row);
}

bool is_blank(const std::string& line) { return line.find_first_not_of(" \t\r\n") == std::string::npos; }

}  // namespace

std::vector<Conversation> read_jsonl(const std::filesystem::path& path, DataFormat format, OnBadLine on_bad_line,
                                     ReadReport* report) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(fmt::format("cannot open dataset '{}'", path.string()));
  std::vector<Conversation> conversations;
  ReadReport counts;
  std::string line;
  for (int64_t line_number = 1; std::getline(file, line); ++line_number) {
    if (line_number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 byte-order mark
    if (is_blank(line)) continue;
    ++counts.lines_read;
    const std::string source = fmt::format("{}:{}", path.string(), line_number);
    try {
      conversations.push_back({parse_line(line, format), source});
    } catch (const BadLine& bad) {
      if (on_bad_line == OnBadLine::fail) {
        throw InputError(fmt::format("{}: {}; HINT: fix the line, or skip bad lines (on_bad_line: skip)", source,
                                     bad.reason));
      }
      tune::log::warn("{}: {}; line skipped", source, bad.reason);
      ++counts.lines_skipped;
    }
  }
  if (conversations.empty()) {
    throw InputError(counts.lines_read == 0
                         ? fmt::format("dataset '{}' is empty: it has no JSONL rows", path.string())
                         : fmt::format("dataset '{}' has no usable rows: all {} were skipped as bad", path.string(),
                                       counts.lines_skipped));
  }
  if (report != nullptr) *report = counts;
  return conversations;
}

}  // namespace tune::data
