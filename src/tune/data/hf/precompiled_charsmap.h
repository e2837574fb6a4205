// A sentencepiece model's normalization map (NormalizerSpec.precompiled_charsmap: nmt_nfkc's NFKC and extras, or a
// custom rule table) applied as the `tokenizers` library's Precompiled normalizer applies it, which is what
// transformers 5 runs for every sentencepiece-converted tokenizer (T5, and any spiece.model it converts).
//
// The blob is a little-endian uint32 byte size of a darts-clone double-array trie, that trie (uint32 units), then the
// NUL-terminated replacement strings the trie's values index into; sentencepiece's own normalizer reads the same.
//
// `tokenizers` does not apply the map as sentencepiece does (per character, longest match). It walks the text's
// extended grapheme clusters: a cluster shorter than 6 bytes for which any prefix is in the map becomes the
// replacement of the *shortest* such prefix, whatever follows in the cluster ("½" + ZWJ -> "1⁄2", "ﬁ" + acute ->
// "fi"); any other cluster is mapped one character at a time. That is kept here on purpose: it is the reference
// tune's T5 tokenizer must match id for id. Grapheme clusters come from utf8proc (Unicode 15 on Debian 12; the Rust
// unicode-segmentation crate behind `tokenizers` may follow a later Unicode, which could only matter for
// characters assigned since or for Indic conjuncts, Unicode 15.1's rule GB9c).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tune::data::hf {

class PrecompiledCharsMap {
 public:
  // `blob` as stored in the model; an empty blob is the identity map. A blob whose sizes do not add up throws
  // tune::InputError naming `source`.
  PrecompiledCharsMap(std::string_view blob, const std::string& source);

  bool empty() const { return trie_.empty(); }

  // The replacement for the shortest prefix of `chunk` that the map holds, or nullopt when no prefix is mapped.
  std::optional<std::string_view> shortest_prefix_replacement(std::string_view chunk) const;

  // `text` normalized as `tokenizers`' Precompiled normalizer does (per grapheme cluster, above). Invalid UTF-8
  // bytes pass through unchanged, each as its own cluster.
  std::string normalize(std::string_view text) const;

 private:
  std::vector<uint32_t> trie_;
  std::string replacements_;
};

}  // namespace tune::data::hf
