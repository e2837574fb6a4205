// Python-flavoured JSON: the bare non-finite literals become marked strings before parsing, then doubles after.
#include "tune/io/python_json.h"

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "tune/core/error.h"

namespace tune::io {
namespace {

// A string no config holds (it starts with U+0000), standing for a non-finite literal while nlohmann parses;
// written into the text as the JSON escape \u0000.
const std::string kMarker = std::string(1, '\0') + "python-literal:";

struct Literal {
  const char* word;
  double value;
};
const Literal kLiterals[] = {{"-Infinity", -std::numeric_limits<double>::infinity()},
                             {"Infinity", std::numeric_limits<double>::infinity()},
                             {"NaN", std::numeric_limits<double>::quiet_NaN()}};

// Rewrites the literals found outside strings as marked JSON strings.
std::string mark_literals(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];  // an escaped character never ends the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const auto& literal : kLiterals) {
      if (text.compare(i, std::char_traits<char>::length(literal.word), literal.word) == 0) {
        out += "\"\\u0000python-literal:";
        out += literal.word;
        out += '"';
        i += std::char_traits<char>::length(literal.word) - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

void restore_literals(nlohmann::json& node) {
  if (node.is_string()) {
    const auto& text = node.get_ref<const std::string&>();
    if (text.compare(0, kMarker.size(), kMarker) != 0) return;
    for (const auto& literal : kLiterals) {
      if (text.substr(kMarker.size()) == literal.word) {
        node = literal.value;
        return;
      }
    }
  } else if (node.is_structured()) {
    for (auto& child : node) restore_literals(child);
  }
}

}  // namespace

nlohmann::json parse_python_json(const std::string& text, const std::string& source) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(mark_literals(text));
  } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for a number like 1e999
    throw InputError(fmt::format("{}: invalid JSON: {}", source, error.what()));
  }
  restore_literals(json);
  return json;
}

nlohmann::json read_python_json_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    throw InputError(fmt::format("{}: cannot open {}", path.string(), what));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_python_json(text, path.string());
}

}  // namespace tune::io
