// UTF-8 helpers for Python string semantics.
#include "tune/jinja/utf8.h"

#include <algorithm>

namespace tune::jinja {

std::vector<std::string> split_code_points(const std::string& text) {
  std::vector<std::string> code_points;
  for (size_t i = 0; i < text.size();) {
    size_t length = 1;
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead >= 0xF0) {
      length = 4;
    } else if (lead >= 0xE0) {
      length = 3;
    } else if (lead >= 0xC0) {
      length = 2;
    }
    length = std::min(length, text.size() - i);
    code_points.push_back(text.substr(i, length));
    i += length;
  }
  return code_points;
}

size_t count_code_points(const std::string& text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool is_python_whitespace(const std::string& code_point) {
  // The code points with Unicode's White_Space property or bidi class B/S/WS, as CPython's str.isspace().
  static const char* const kWhitespace[] = {
      " ",  "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f",
      "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
      "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  for (const char* whitespace : kWhitespace)
    if (code_point == whitespace) return true;
  return false;
}

}  // namespace tune::jinja
