// Canonical YAML spellings of config values (see yaml_text.h).
#include "tune/config/yaml_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <regex>

namespace tune::config {

std::string real_text(double value) {
  std::string text = fmt::format("{}", value);  // fmt prints the shortest text that round-trips
  if (text == "inf") return ".inf";
  if (text == "-inf") return "-.inf";
  if (text == "nan") return ".nan";
  // "3" would read back as an integer; keep it visibly a real.
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

bool parse_integer_text(const std::string& text, long long& value) {
  static const std::regex kInteger(R"([-+]?[0-9]+)");
  if (!std::regex_match(text, kInteger)) return false;
  const char* begin = text.data() + (text.front() == '+' ? 1 : 0);  // from_chars refuses a leading '+'
  const auto [end, error] = std::from_chars(begin, text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

bool parse_real_text(const std::string& text, double& value) {
  static const std::regex kReal(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (!std::regex_match(text, kReal)) return false;
  const char* begin = text.data() + (text.front() == '+' ? 1 : 0);
  const auto [end, error] = std::from_chars(begin, text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

bool looks_like_boolean_or_null(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* const kWords[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"};
  return std::any_of(std::begin(kWords), std::end(kWords), [&](const char* word) { return lower == word; });
}

bool looks_like_number(const std::string& text) {
  // Integers (decimal, hex, octal), decimals with optional exponent, and the YAML infinities and NaN.
  static const std::regex kNumber(R"([-+]?()"
                                  R"(0x[0-9a-fA-F_]+|0o?[0-7_]+|[0-9][0-9_]*)"  // integers
                                  R"(|([0-9][0-9_]*)?\.[0-9_]*([eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+)"  // reals
                                  R"(|\.(inf|Inf|INF)|\.(nan|NaN|NAN)))");
  return std::regex_match(text, kNumber);
}

namespace {

// Characters that keep a plain scalar plain anywhere in it; anything else (': ', '#', quotes, brackets,
// commas, '~', leading '-', whitespace) gets quoted rather than reasoned about.
bool is_safe_plain(const std::string& text) {
  if (text.empty()) return false;
  const auto safe_char = [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '/' || c == '+' || c == '(' || c == ')' ||
           c >= 0x80;
  };
  if (!std::all_of(text.begin(), text.end(), safe_char)) return false;
  const char first = text.front();
  return first != '-';  // "- x" starts a sequence entry; "-x" is plain but not worth the doubt
}

}  // namespace

std::string string_text(const std::string& value) {
  if (is_safe_plain(value) && !looks_like_boolean_or_null(value) && !looks_like_number(value)) return value;
  std::string quoted = "\"";
  for (const unsigned char c : value) {
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\t':
        quoted += "\\t";
        break;
      case '\r':
        quoted += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          quoted += fmt::format("\\x{:02x}", c);
        } else {
          quoted += static_cast<char>(c);
        }
    }
  }
  return quoted + "\"";
}

std::string flow_list_text(const std::vector<std::string>& element_texts) {
  return fmt::format("[{}]", fmt::join(element_texts, ", "));
}

}  // namespace tune::config
