// Raw text for continued pre-training (data.format: text): each document tokenized as BOS + text + EOS with the
// loss on every token, and documents longer than a row cut into consecutive chunks instead of truncated. No chat
// template is involved.
#pragma once

#include <cstdint>
#include <vector>

#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"

namespace tune::data {

struct TextTokenizeReport {
  int64_t documents = 0;
  int64_t split_documents = 0;  // documents longer than max_length, cut into chunks
  int64_t chunks = 0;           // examples produced
  int64_t tokens = 0;           // tokens of every document, BOS and EOS included (each counted once)
};

// One example per chunk of at most max_length tokens; every label equals its token. Consecutive chunks of a
// document overlap by one token: the loader never trains a row segment's first token (nothing precedes it), so
// the overlap makes every token after BOS a prediction target exactly once, as in the unsplit document. Examples
// carry `source` as given. Throws InputError when the tokenizer has no EOS token (documents must end with one).
std::vector<TokenizedExample> tokenize_documents(const std::vector<TextDocument>& documents,
                                                 const Tokenizer& tokenizer, int64_t max_length, int32_t source = 0,
                                                 TextTokenizeReport* report = nullptr);

}  // namespace tune::data
