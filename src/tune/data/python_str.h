// Python's str.lower() and str.strip() on UTF-8 text, for preprocessing that diffusers' pipelines do in Python
// (LattePipeline's and SanaPipeline's `text.lower().strip()`), so tune's prompts reach the tokenizer as theirs do.
#pragma once

#include <string>
#include <string_view>

namespace tune::data {

// str.lower(): Unicode's full lowercase mapping (utf8proc's simple mapping, plus U+0130 -> "i̇", the one
// unconditional multi-character lowercase mapping) and Final_Sigma (Σ becomes ς at the end of a word: after a
// cased letter and not before one, case-ignorable characters skipped on both sides). "Cased" counts letters of
// category Lu, Ll or Lt and characters with a case mapping; Unicode's Other_Lowercase/Other_Uppercase characters
// without one (modifier letters such as ʰ) are not, which only matters for a Σ right after one. Bytes that are not
// valid UTF-8 are kept as they are.
std::string python_lower(std::string_view text);

// str.strip() without arguments: leading and trailing characters Python's str.isspace() accepts (ASCII whitespace,
// the separators U+001C-U+001F, U+0085, U+00A0 and Unicode's other space separators, line and paragraph
// separators).
std::string python_strip(std::string_view text);

}  // namespace tune::data
