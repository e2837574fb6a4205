// Parsing a row and choosing its format by its fields; the helpers every format's reader shares.
#include "tune/data/sft_rows.h"

#include <fmt/format.h>

namespace tune::data::rows {

namespace {

// automatic: the field that names each format decides; nothing matching is the row's fault, not a guess.
DataFormat detect(const nlohmann::json& row) {
  if (row.contains("messages")) return DataFormat::chat;
  if (row.contains("conversations")) return DataFormat::sharegpt;
  if (row.contains("instruction") || row.contains("output")) return DataFormat::instruction;
  if (row.contains("text")) {
    throw BadRow{"a row with only 'text' is raw text; set data.format: text for continued pre-training"};
  }
  throw BadRow{fmt::format("neither 'messages' (chat format), 'conversations' (ShareGPT) nor "
                           "'instruction'/'output' (instruction format) present; fields: {}",
                           field_names(row))};
}

}  // namespace

std::string field_names(const nlohmann::json& row) {
  std::string names;
  for (const auto& item : row.items()) names += (names.empty() ? "'" : ", '") + item.key() + "'";
  return names.empty() ? "none" : names;
}

std::string string_field(const nlohmann::json& row, const std::string& field, bool required, const std::string& what) {
  const auto found = row.find(field);
  if (found == row.end() || (!required && found->is_null())) {
    if (required) throw BadRow{fmt::format("missing field '{}' ({})", field, what)};
    return "";
  }
  if (!found->is_string()) {
    throw BadRow{fmt::format("field '{}' must be a string, got {}", field, found->type_name())};
  }
  return found->get<std::string>();
}

ParsedRow parse_row(std::string_view json_text, DataFormat format) {
  nlohmann::json row;
  try {
    row = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for a number like 1e999
    throw BadRow{fmt::format("malformed JSON: {}", error.what())};
  }
  if (!row.is_object()) throw BadRow{fmt::format("each row must be a JSON object, got {}", row.type_name())};
  if (format == DataFormat::automatic) format = detect(row);
  ParsedRow parsed;
  switch (format) {
    case DataFormat::instruction: parsed.messages = instruction_messages(row); break;
    case DataFormat::chat: parsed.messages = chat_messages(row); break;
    case DataFormat::sharegpt: parsed.messages = sharegpt_messages(row); break;
    case DataFormat::text: parsed.text = text_of(row); break;
    case DataFormat::automatic: break;  // resolved above
  }
  return parsed;
}

}  // namespace tune::data::rows
