// A compiled Unicode regular expression (PCRE2 with UTF and Unicode properties), for the tokenizer's Split and
// ByteLevel pre-tokenizers. The patterns tokenizers use (\p{L}, \p{N}, (?i:...), look-ahead) are PCRE syntax.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tune::data::hf {

class Regex {
 public:
  // Throws tune::InputError naming `where` (e.g. "tokenizer.json pre_tokenizer Split") and PCRE2's message.
  Regex(const std::string& pattern, const std::string& where);

  // Every non-overlapping match in `text` (valid UTF-8), left to right, as [begin, end) byte offsets. An empty
  // match advances by one code point, as the regex crates do.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::shared_ptr<Compiled> compiled_;
};

}  // namespace tune::data::hf
