// The byte-level alphabet (see byte_level.h).
#include "tune/data/hf/byte_level.h"

#include <array>
#include <unordered_map>

#include "tune/data/hf/text_utils.h"

namespace tune::data::hf {
namespace {

struct Alphabet {
  std::array<std::string, 256> of_byte;
  std::unordered_map<std::string, unsigned char> to_byte;
  Alphabet() {
    // Bytes that are printable and not space in Latin-1 keep their code point; the others take 256, 257, ... in
    // byte order (GPT-2's bytes_to_unicode).
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next++;
      of_byte[static_cast<size_t>(b)] = encode_code_point(cp);
      to_byte[of_byte[static_cast<size_t>(b)]] = static_cast<unsigned char>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

}  // namespace

std::string bytes_to_alphabet(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += a.of_byte[b];
  return out;
}

std::string alphabet_to_bytes(std::string_view text) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t length = std::min<size_t>(sequence_length(static_cast<unsigned char>(text[i])), text.size() - i);
    const std::string cp(text.substr(i, length));
    const auto found = a.to_byte.find(cp);
    if (found != a.to_byte.end()) {
      out += static_cast<char>(found->second);
    } else {
      out += cp;
    }
    i += length;
  }
  return out;
}

}  // namespace tune::data::hf
