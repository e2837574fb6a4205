// T5's tokenizer: a sentencepiece Unigram model saved as spiece.model, with T5's conventions on top, encoding as
// transformers 5's T5Tokenizer (a `tokenizers` Unigram converted from spiece.model) does.
#pragma once

#include <filesystem>
#include <memory>

#include "tune/data/tokenizer_backend.h"

namespace tune::data {

inline constexpr const char* kT5SentencePieceFile = "spiece.model";

// T5's conventions: no BOS; EOS (</s>) appended when add_eos; pad is the model's <pad> (id 0 in T5's models);
// `extra_ids` sentinels <extra_id_0> .. <extra_id_{extra_ids-1}> after the sentencepiece vocabulary, in reverse
// (<extra_id_0> is the last id), so vocab_size() = pieces + extra_ids. Special-token text in the input (the pad,
// EOS and unknown pieces and the sentinels) maps to its id, the leftmost and then longest match first.
//
// The text between special tokens is split at whitespace and every word encoded with a leading "▁" (transformers'
// WhitespaceSplit + Metaspace(prepend "always")); sentencepiece's own encoding of the whole run does the same
// (it collapses whitespace and adds a dummy prefix), except for U+0085 (NEL): Unicode whitespace to the
// `tokenizers` library, an unknown character to sentencepiece, so it is read as a space. Checked against
// transformers on whitespace, control and format characters (as "a<c>b"), random mixes with combining marks and
// joiners, and runs of consecutive code points over U+00A0-U+33FF, U+F900-U+FFFF and U+1F100-U+1F6FF
// (scripts/make_t5_fixture.py, tests/models/test_t5_encoder.cpp).
//
// Normalization follows transformers 5, not sentencepiece: transformers applies spiece.model's normalization map
// (NFKC and sentencepiece's extras) per grapheme cluster, and a cluster of fewer than 6 bytes whose first
// character(s) the map rewrites becomes that rewrite alone, losing the combining marks or joiners that follow
// ("½‍" -> "1⁄2", "ﬁ́" -> "fi"); sentencepiece (and transformers 4's slow T5Tokenizer) maps per character,
// longest match. tune normalizes as transformers 5 does (hf/precompiled_charsmap.h) and then encodes with a copy of
// the model whose own map is removed (sentencepiece_model_proto.h). Only text with combining marks, joiners or
// variation selectors after compatibility characters, or decomposed accents, tells the two apart.
//
// Beside spiece.model, tokenizer_config.json may set extra_ids (default 100) and must name T5Tokenizer (or
// T5TokenizerFast) if it names a class; its added_tokens_decoder and an added_tokens.json may only restate T5's
// own special tokens at their ids. Anything else throws tune::InputError naming the file and the token: tune would
// otherwise encode differently from transformers. A tokenizer.json beside spiece.model is not read (it is the
// same tokenizer converted, and a Unigram one, which tune's tokenizer.json reader does not implement).
std::shared_ptr<TokenizerBackend> load_t5_tokenizer(const std::filesystem::path& spiece_model);

}  // namespace tune::data
