// Python whitespace by code point.
#include "tune/jinja/utf8.h"

namespace tune::jinja {

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
