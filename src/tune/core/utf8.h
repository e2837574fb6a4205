// UTF-8 byte sequences and code points, shared by the tokenizer pipeline (data/hf) and the Jinja interpreter (jinja/),
// which both hold text as UTF-8 bytes and must count, split or repair it by code point.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tune::utf8 {

// Byte length of the UTF-8 sequence that starts with `lead` (1 for an invalid lead byte).
int sequence_length(unsigned char lead);

// The text split into its code points, each as its UTF-8 bytes (an invalid lead byte stands alone; a truncated
// sequence at the end keeps what is there).
std::vector<std::string> split_code_points(std::string_view text);

// Code points in valid UTF-8 text (Python's len(str)).
size_t count_code_points(std::string_view text);

std::string encode_code_point(char32_t code_point);

// The text with every invalid UTF-8 sequence replaced by U+FFFD, as Python's bytes.decode("utf-8", "replace")
// and Rust's String::from_utf8_lossy do (one U+FFFD per maximal invalid subpart).
std::string sanitize(std::string_view bytes);

}  // namespace tune::utf8
