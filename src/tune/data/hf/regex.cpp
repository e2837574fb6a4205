// PCRE2 behind tune's Regex (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tune/data/hf/regex.h"

#include <fmt/format.h>
#include <pcre2.h>

#include "tune/core/error.h"
#include "tune/data/hf/text_utils.h"

namespace tune::data::hf {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& where) : compiled_(std::make_shared<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \w, \d and POSIX classes follow Unicode properties, as in Rust's regex and Oniguruma.
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw InputError(fmt::format("{}: cannot compile the regex {:?} at offset {}: {}", where, pattern, offset,
                                 reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or an error: no further matches
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // Empty match: nothing to record, move past one code point.
      if (begin >= text.size()) break;
      start = begin + sequence_length(static_cast<unsigned char>(text[begin]));
      continue;
    }
    matches.emplace_back(begin, end);
    start = end;
  }
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace tune::data::hf
