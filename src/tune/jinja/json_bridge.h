// Values to and from JSON: from_json turns a chat's messages (parsed JSON) into template values; to_json_text is
// the `tojson` filter as transformers defines it: json.dumps(value, ensure_ascii=False, indent=..., separators=...,
// sort_keys=...), not jinja2's HTML-escaping default.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tune/jinja/value.h"

namespace tune::jinja {

// ordered_json keeps the file's key order, which Python's dict keeps too (and `tojson` prints).
Value from_json(const nlohmann::ordered_json& json);
Value from_json(const nlohmann::json& json);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // json.dumps's indent as a string of spaces; none writes one line
  std::optional<std::string> item_separator;  // default ", " on one line, "," when indented
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape every non-ASCII character as \uXXXX (surrogate pairs above U+FFFF)
};
std::string to_json_text(const Value& value, const JsonDumpOptions& options);

}  // namespace tune::jinja
