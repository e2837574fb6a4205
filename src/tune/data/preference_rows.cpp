// Reading preference rows: the three forms TRL's DPOTrainer takes, told apart by their fields, validated row by row
// with the reason and FILE:LINE of a bad one.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "tune/core/error.h"
#include "tune/data/dataset_file.h"
#include "tune/data/preference_dataset.h"
#include "tune/data/sft_rows.h"

namespace tune::data {
namespace {

enum class Form { standard, conversational, implicit_text, implicit_conversation };

const char* form_name(Form form) {
  switch (form) {
    case Form::standard: return "standard ({prompt, chosen, rejected} strings)";
    case Form::conversational: return "conversational (prompt, chosen and rejected as message lists)";
    case Form::implicit_text: return "implicit prompt ({chosen, rejected} strings)";
    case Form::implicit_conversation: return "implicit prompt ({chosen, rejected} conversations)";
  }
  return "?";
}

const nlohmann::json& required(const nlohmann::json& row, const std::string& field) {
  const auto found = row.find(field);
  if (found == row.end() || found->is_null()) {
    throw rows::BadRow{fmt::format("missing field '{}' (preference rows need chosen and rejected, and a prompt "
                                   "unless both are whole conversations); the row has {}",
                                   field, rows::field_names(row))};
  }
  return *found;
}

Form form_of(const nlohmann::json& row) {
  const nlohmann::json& chosen = required(row, "chosen");
  const nlohmann::json& rejected = required(row, "rejected");
  const auto prompt = row.find("prompt");
  const bool has_prompt = prompt != row.end() && !prompt->is_null();
  auto same_kind = [&](bool want_array, const std::string& why) {
    for (const auto* field : {"chosen", "rejected"}) {
      const nlohmann::json& value = row.at(field);
      if (want_array ? !value.is_array() : !value.is_string()) {
        throw rows::BadRow{fmt::format("field '{}' must be {} ({}), got {}", field,
                                       want_array ? "a list of messages" : "a string", why, value.type_name())};
      }
    }
  };
  if (has_prompt) {
    if (prompt->is_string()) {
      same_kind(false, "the prompt is a string");
      return Form::standard;
    }
    if (!prompt->is_array()) {
      throw rows::BadRow{fmt::format("field 'prompt' must be a string or a list of messages, got {}",
                                     prompt->type_name())};
    }
    same_kind(true, "the prompt is a list of messages");
    return Form::conversational;
  }
  if (chosen.is_string() && rejected.is_string()) return Form::implicit_text;
  same_kind(true, "without a prompt, chosen and rejected are two strings or two whole conversations");
  return Form::implicit_conversation;
}

// The prompt's messages: an optional system message, then user and assistant alternating, ending with the user.
void check_prompt(const std::vector<ChatMessage>& prompt, const std::string& what) {
  if (prompt.empty()) throw rows::BadRow{fmt::format("{} is empty: there is no prompt to condition on", what)};
  const size_t first_turn = prompt.front().role == "system" ? 1 : 0;
  for (size_t i = first_turn; i < prompt.size(); ++i) {
    const char* expected = (i - first_turn) % 2 == 0 ? "user" : "assistant";
    if (prompt[i].role != expected) {
      throw rows::BadRow{fmt::format("{}[{}].role is '{}' where '{}' was expected (an optional system message, "
                                     "then user and assistant alternating)",
                                     what, i, prompt[i].role, expected)};
    }
  }
  if (prompt.back().role != "user") {
    throw rows::BadRow{fmt::format("{} ends with a {} turn; the prompt must end with the user's turn",
                                   what, prompt.back().role)};
  }
}

void check_completion(const std::vector<ChatMessage>& completion, const std::string& field) {
  if (completion.empty()) throw rows::BadRow{fmt::format("'{}' has no reply after the shared prompt", field)};
  for (size_t i = 0; i < completion.size(); ++i) {
    if (completion[i].role != "assistant") {
      throw rows::BadRow{fmt::format("{}[{}].role is '{}'; a completion holds the assistant's reply only", field,
                                     i, completion[i].role)};
    }
  }
}

bool same_message(const ChatMessage& a, const ChatMessage& b) { return a.role == b.role && a.content == b.content; }

// TRL's extract_prompt: the first position where chosen and rejected differ (when one is a prefix of the other,
// the last position they share, as TRL's loop leaves it); for text, a space just before it goes to the completions.
template <typename Sequence, typename Equal>
size_t shared_prefix_end(const Sequence& chosen, const Sequence& rejected, Equal equal) {
  const size_t shared = std::min(chosen.size(), rejected.size());
  for (size_t i = 0; i < shared; ++i) {
    if (!equal(chosen[i], rejected[i])) return i;
  }
  return shared == 0 ? 0 : shared - 1;
}

PreferenceRow parse_preference_row(const nlohmann::json& row, Form form) {
  PreferenceRow out;
  switch (form) {
    case Form::standard:
      out.prompt_text = row.at("prompt").get<std::string>();
      out.chosen_text = row.at("chosen").get<std::string>();
      out.rejected_text = row.at("rejected").get<std::string>();
      break;
    case Form::implicit_text: {
      const std::string chosen = row.at("chosen").get<std::string>();
      const std::string rejected = row.at("rejected").get<std::string>();
      size_t end = shared_prefix_end(chosen, rejected, [](char a, char b) { return a == b; });
      if (end > 0 && end < chosen.size() && chosen[end - 1] == ' ') --end;
      out.prompt_text = chosen.substr(0, end);
      out.chosen_text = chosen.substr(end);
      out.rejected_text = rejected.substr(end);
      break;
    }
    case Form::conversational:
      out.conversational = true;
      out.prompt_messages = rows::message_list(row.at("prompt"), "prompt");
      out.chosen_messages = rows::message_list(row.at("chosen"), "chosen");
      out.rejected_messages = rows::message_list(row.at("rejected"), "rejected");
      check_prompt(out.prompt_messages, "prompt");
      break;
    case Form::implicit_conversation: {
      out.conversational = true;
      const auto chosen = rows::message_list(row.at("chosen"), "chosen");
      const auto rejected = rows::message_list(row.at("rejected"), "rejected");
      const size_t end = shared_prefix_end(chosen, rejected, same_message);
      out.prompt_messages.assign(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(end));
      out.chosen_messages.assign(chosen.begin() + static_cast<std::ptrdiff_t>(end), chosen.end());
      out.rejected_messages.assign(rejected.begin() + static_cast<std::ptrdiff_t>(end), rejected.end());
      check_prompt(out.prompt_messages, "the messages chosen and rejected share (the prompt)");
      break;
    }
  }
  if (out.conversational) {
    check_completion(out.chosen_messages, "chosen");
    check_completion(out.rejected_messages, "rejected");
  } else if (out.chosen_text.empty() || out.rejected_text.empty()) {
    throw rows::BadRow{fmt::format("'{}' is empty after the prompt: there is nothing to prefer",
                                   out.chosen_text.empty() ? "chosen" : "rejected")};
  }
  return out;
}

}  // namespace

std::vector<PreferenceRow> read_preference_file(const std::filesystem::path& path, OnBadLine on_bad_line,
                                                ReadReport* report) {
  ReadReport local;
  ReadReport& counts = report != nullptr ? *report : local;
  counts = ReadReport{};
  std::vector<PreferenceRow> rows_read;
  std::optional<Form> file_form;
  for_each_json_row(path, on_bad_line, counts, [&](const layouts::RawRow& raw) {
    const nlohmann::json row = nlohmann::json::parse(raw.json, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded()) throw rows::BadRow{"not valid JSON"};
    if (!row.is_object()) throw rows::BadRow{fmt::format("a row must be a JSON object, got {}", row.type_name())};
    const Form form = form_of(row);
    // TRL reads a whole dataset in the form of its first row; a file mixing forms is a mistake to name, not guess.
    if (file_form && *file_form != form) {
      throw rows::BadRow{fmt::format("this row is in the {} form, but the file's first row was in the {} form; "
                                     "one file holds one form",
                                     form_name(form), form_name(*file_form))};
    }
    file_form = form;
    PreferenceRow parsed = parse_preference_row(row, form);
    parsed.source = raw.source;
    rows_read.push_back(std::move(parsed));
  });
  if (rows_read.empty()) {
    throw InputError(counts.rows_read == 0
                         ? fmt::format("dataset '{}' is empty: it has no rows", path.string())
                         : fmt::format("dataset '{}' has no usable rows: all {} were skipped as bad ({})",
                                       path.string(), counts.rows_skipped, fmt::join(counts.first_problems, "; ")));
  }
  return rows_read;
}

}  // namespace tune::data
