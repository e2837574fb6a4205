// UTF-8 helpers (see text_utils.h).
#include "tune/data/hf/text_utils.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tune/core/error.h"

namespace tune::data::hf {

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
