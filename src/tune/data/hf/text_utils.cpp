// UTF-8 helpers (see text_utils.h).
#include "tune/data/hf/text_utils.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tune/core/error.h"

namespace tune::data::hf {

int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

std::string encode_code_point(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string sanitize_utf8(std::string_view bytes) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  const size_t n = bytes.size();
  auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  while (i < n) {
    const unsigned char lead = byte(i);
    if (lead < 0x80) {
      out += static_cast<char>(lead);
      ++i;
      continue;
    }
    // The valid ranges of the second byte per lead (Unicode Table 3-7); later bytes are 80..BF. A maximal
    // invalid subpart (the longest valid prefix of a sequence) becomes one U+FFFD.
    int length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    }
    if (length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool valid = true;
    for (int k = 1; k < length; ++k, ++j) {
      const unsigned char lo = k == 1 ? low : 0x80, hi = k == 1 ? high : 0xBF;
      if (j >= n || byte(j) < lo || byte(j) > hi) {
        valid = false;
        break;
      }
    }
    if (valid) {
      out.append(bytes.substr(i, length));
    } else {
      out += kReplacement;
    }
    i = j;
  }
  return out;
}

std::vector<std::string> split_code_points(std::string_view text) {
  std::vector<std::string> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t length = std::min<size_t>(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    out.emplace_back(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string normalize(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &result, static_cast<utf8proc_option_t>(options));
  if (length < 0) throw InputError(std::string("tokenizer normalizer: ") + utf8proc_errmsg(length));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  utf8proc_ssize_t i = 0;
  const auto* data = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  while (i < size) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t read = utf8proc_iterate(data + i, size - i, &cp);
    if (read <= 0) {  // not valid UTF-8: keep the byte as it is
      out += text[static_cast<size_t>(i)];
      ++i;
      continue;
    }
    out += encode_code_point(static_cast<char32_t>(utf8proc_tolower(cp)));
    i += read;
  }
  return out;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (true) {
    const size_t found = text.find(from, start);
    if (found == std::string_view::npos) break;
    out.append(text.substr(start, found - start));
    out.append(to);
    start = found + from.size();
  }
  out.append(text.substr(start));
  return out;
}

}  // namespace tune::data::hf
