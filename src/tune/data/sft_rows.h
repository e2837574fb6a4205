// Parsing one row (a JSON object) of an SFT data file in each format. A problem throws BadRow with the reason;
// the file readers (dataset_file.h) add file:line or file:index N and decide between failing and skipping.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tune/data/sft_dataset.h"

namespace tune::data::rows {

struct BadRow {
  std::string reason;
};

// A parsed row: the messages of a conversation, or (format text) the document's text.
struct ParsedRow {
  std::vector<ChatMessage> messages;
  std::string text;
};

// Parses `json_text` and reads it in `format` (automatic: by the fields present).
ParsedRow parse_row(std::string_view json_text, DataFormat format);

// One reader per format (instruction_rows.cpp, chat_rows.cpp, sharegpt_rows.cpp, text_rows.cpp); `row` is an object.
std::vector<ChatMessage> instruction_messages(const nlohmann::json& row);
std::vector<ChatMessage> chat_messages(const nlohmann::json& row);
// `list` (the row's field `field`) as messages: a non-empty array of {role: system|user|assistant, content}.
// The turn order is the caller's to check.
std::vector<ChatMessage> message_list(const nlohmann::json& list, const std::string& field);
std::vector<ChatMessage> sharegpt_messages(const nlohmann::json& row);
std::string text_of(const nlohmann::json& row);

// The string at row[field]; absent (or null when optional) gives "". `what` says what the row needs.
std::string string_field(const nlohmann::json& row, const std::string& field, bool required, const std::string& what);

// The order every template assumes: an optional system message, then user and assistant alternating, ending with
// the assistant (the last reply is what carries the loss). `list` is the row's field ("messages"); `name_of(i)` says
// what message i is as the row spells it ("messages[2].role is 'user'", "conversations[2].from is 'human' (user)").
void check_turn_order(const std::vector<ChatMessage>& messages, const std::string& list,
                      const std::function<std::string(size_t)>& name_of);

std::string field_names(const nlohmann::json& row);  // "'a', 'b'" or "none"

}  // namespace tune::data::rows
