// str.lower() and str.strip() (see python_str.h).
#include "tune/data/python_str.h"

#include <utf8proc.h>

#include <vector>

#include "tune/core/utf8.h"

namespace tune::data {
namespace {

constexpr char32_t kCapitalDotlessI = 0x130, kCapitalSigma = 0x3A3, kSmallSigma = 0x3C3, kFinalSigma = 0x3C2;

// A decoded code point, or an invalid byte (`valid` false) kept verbatim.
struct Character {
  char32_t code_point = 0;
  std::string_view bytes;
  bool valid = false;
};

std::vector<Character> decode(std::string_view text) {
  std::vector<Character> characters;
  for (size_t at = 0; at < text.size();) {
    utf8proc_int32_t code_point = 0;
    const auto read = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                       static_cast<utf8proc_ssize_t>(text.size() - at), &code_point);
    const size_t length = read > 0 ? static_cast<size_t>(read) : 1;
    characters.push_back({static_cast<char32_t>(code_point), text.substr(at, length), read > 0});
    at += length;
  }
  return characters;
}

bool is_cased(char32_t c) {
  const auto cp = static_cast<utf8proc_int32_t>(c);
  const utf8proc_category_t category = utf8proc_category(cp);
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT ||
         utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
}

// Unicode's Case_Ignorable: categories Mn, Me, Cf, Lm, Sk, and Word_Break MidLetter, MidNumLet and Single_Quote.
bool is_case_ignorable(char32_t c) {
  switch (c) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018: case 0x2019:
    case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A:
      return true;
    default: break;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default: return false;
  }
}

// CPython's handle_capital_sigma: \p{cased} \p{case-ignorable}* Σ !(\p{case-ignorable}* \p{cased}).
bool is_final_sigma(const std::vector<Character>& characters, size_t at) {
  size_t before = at;
  while (before > 0 && characters[before - 1].valid && is_case_ignorable(characters[before - 1].code_point)) --before;
  if (before == 0 || !characters[before - 1].valid || !is_cased(characters[before - 1].code_point)) return false;
  size_t after = at + 1;
  while (after < characters.size() && characters[after].valid && is_case_ignorable(characters[after].code_point)) {
    ++after;
  }
  return after == characters.size() || !characters[after].valid || !is_cased(characters[after].code_point);
}

// str.isspace(): bidirectional class WS, B or S, or category Zs (CPython's _PyUnicode_IsWhitespace table).
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

std::string python_lower(std::string_view text) {
  const std::vector<Character> characters = decode(text);
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < characters.size(); ++at) {
    const Character& character = characters[at];
    if (!character.valid) {
      out.append(character.bytes);
    } else if (character.code_point == kCapitalDotlessI) {
      out += "i\xCC\x87";  // i + combining dot above (SpecialCasing.txt)
    } else if (character.code_point == kCapitalSigma) {
      out += utf8::encode_code_point(is_final_sigma(characters, at) ? kFinalSigma : kSmallSigma);
    } else {
      out += utf8::encode_code_point(
          static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(character.code_point))));
    }
  }
  return out;
}

std::string python_strip(std::string_view text) {
  const std::vector<Character> characters = decode(text);
  size_t begin = 0, end = characters.size();
  while (begin < end && characters[begin].valid && is_python_space(characters[begin].code_point)) ++begin;
  while (end > begin && characters[end - 1].valid && is_python_space(characters[end - 1].code_point)) --end;
  if (begin == end) return "";
  const std::string_view& last = characters[end - 1].bytes;
  const auto first_byte = static_cast<size_t>(characters[begin].bytes.data() - text.data());
  const auto end_byte = static_cast<size_t>(last.data() - text.data()) + last.size();
  return std::string(text.substr(first_byte, end_byte - first_byte));
}

}  // namespace tune::data
