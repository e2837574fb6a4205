// Text helpers for the Hugging Face tokenizer pipeline: Unicode normalization forms and case mapping (utf8proc, a
// maintained library, not hand-written tables), plus core/utf8.h's code point helpers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tune/core/utf8.h"

namespace tune::data::hf {

// Code points, byte sequences and invalid-UTF-8 repair live in core/utf8.h (shared with jinja/). The tokenizers
// library only ever sees valid UTF-8; tune's callers hand it bytes, so they go through utf8::sanitize first.
using utf8::encode_code_point;
using utf8::sanitize;
using utf8::sequence_length;
using utf8::split_code_points;

enum class NormalForm { nfc, nfd, nfkc, nfkd };
std::string normalize(std::string_view text, NormalForm form);

// Unicode-aware lowercase (utf8proc's simple case mapping), as the Lowercase normalizer.
std::string lowercase(std::string_view text);

// Replaces every occurrence of `from` (non-empty) by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace tune::data::hf
