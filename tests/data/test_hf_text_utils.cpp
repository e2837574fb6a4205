// The UTF-8 helpers under tokenizer.json: invalid sequences replaced as Python's decode("utf-8", "replace") does
// (expected strings computed with CPython), normalization forms, the byte-level alphabet round trip.
#include <catch2/catch.hpp>

#include "tune/data/hf/byte_level.h"
#include "tune/data/hf/text_utils.h"

using namespace tune::data::hf;

TEST_CASE("sanitize_utf8 replaces maximal invalid subparts with U+FFFD, as CPython does") {
  const std::string r = "\xEF\xBF\xBD";
  // b"...".decode("utf-8", "replace") in CPython 3.11:
  CHECK(sanitize("abc") == "abc");
  CHECK(sanitize("\xff") == r);
  CHECK(sanitize("abc\x80" "def") == "abc" + r + "def");
  CHECK(sanitize("\xc3\x28") == r + "(");
  CHECK(sanitize("\xe2\x82") == r);                         // truncated 3-byte sequence: one replacement
  CHECK(sanitize("\xf0\x9f\x98") == r);
  CHECK(sanitize("ok\xed\xa0\x80ok") == "ok" + r + r + r + "ok");  // surrogate: each byte
  CHECK(sanitize("\xc0\xaf") == r + r);                     // overlong
  CHECK(sanitize("\xf5\x80\x80\x80") == r + r + r + r);
  CHECK(sanitize("\xe6\x97\xa5") == "\xe6\x97\xa5");
}

TEST_CASE("normalization forms and lowercase go through utf8proc") {
  CHECK(normalize("e\xCC\x81", NormalForm::nfc) == "\xC3\xA9");        // e + combining acute -> é
  CHECK(normalize("\xC3\xA9", NormalForm::nfd) == "e\xCC\x81");
  CHECK(normalize("\xEF\xAC\x81", NormalForm::nfkc) == "fi");          // ﬁ ligature
  CHECK(normalize("\xEF\xBD\x86", NormalForm::nfkc) == "f");           // fullwidth f
  CHECK(lowercase("HeLLo \xC3\x89T\xC3\x89") == "hello \xC3\xA9t\xC3\xA9");
}

TEST_CASE("the byte-level alphabet maps every byte to one character and back") {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string mapped = bytes_to_alphabet(all);
  CHECK(split_code_points(mapped).size() == 256);
  CHECK(alphabet_to_bytes(mapped) == all);
  CHECK(bytes_to_alphabet(" ") == "\xC4\xA0");   // Ġ
  CHECK(bytes_to_alphabet("\n") == "\xC4\x8A");  // Ċ
  CHECK(bytes_to_alphabet("a") == "a");
}
