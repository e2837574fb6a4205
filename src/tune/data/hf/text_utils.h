// UTF-8 helpers for the Hugging Face tokenizer pipeline: code point iteration, replacement of invalid byte
// sequences, Unicode normalization forms (utf8proc, a maintained library, not hand-written tables).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tune::data::hf {

// The text with every invalid UTF-8 sequence replaced by U+FFFD, as Python's bytes.decode("utf-8", "replace")
// and Rust's String::from_utf8_lossy do (one U+FFFD per maximal invalid subpart). The tokenizers library only
// ever sees valid UTF-8; tune's callers hand it bytes.
std::string sanitize_utf8(std::string_view bytes);

// Byte length of the UTF-8 sequence that starts with `lead` (1 for an invalid lead byte).
int utf8_length(unsigned char lead);

// The text split into its code points, each as its UTF-8 bytes (valid UTF-8 expected).
std::vector<std::string> split_code_points(std::string_view text);

std::string encode_code_point(char32_t code_point);

enum class NormalForm { nfc, nfd, nfkc, nfkd };
std::string normalize(std::string_view text, NormalForm form);

// Unicode-aware lowercase (utf8proc's simple case mapping), as the Lowercase normalizer.
std::string lowercase(std::string_view text);

// Replaces every occurrence of `from` (non-empty) by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace tune::data::hf
