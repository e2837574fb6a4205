// GPT-2's byte-level alphabet: every byte 0..255 as one printable Unicode character (printable Latin-1 bytes map to
// themselves, the rest to U+0100 and up), so byte-level BPE vocabularies hold only visible characters.
#pragma once

#include <string>
#include <string_view>

namespace tune::data::hf {

// Each byte of `bytes` as its alphabet character (UTF-8).
std::string bytes_to_alphabet(std::string_view bytes);
// The inverse for text made of alphabet characters; any other character passes through as its own UTF-8 bytes.
std::string alphabet_to_bytes(std::string_view text);

}  // namespace tune::data::hf
