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
// carry `source` as given and their document's index. Throws InputError when the tokenizer has no EOS token
// (documents must end with one).
std::vector<TokenizedExample> tokenize_documents(const std::vector<TextDocument>& documents,
                                                 const Tokenizer& tokenizer, int64_t max_length, int32_t source = 0,
                                                 TextTokenizeReport* report = nullptr);

// The held-out split of raw text by document, so that no document has chunks on both sides: a seeded shuffle of the
// documents (consecutive chunks of one source and document, as tokenize_documents makes them), the last
// `eval_fraction` of them (at least one when > 0) evaluated, as split_train_eval does with rows. A single document is
// split in place instead: its last `eval_fraction` of chunks (at least one) are evaluated, one stretch of text the
// training chunks do not cover (they share one boundary token, a context and never a target there).
struct TextEvalSplit {
  int64_t documents = 0;           // documents held out
  bool only_document_tail = false;  // the single-document split
};
TextEvalSplit split_train_eval_documents(std::vector<TokenizedExample> all, double eval_fraction, uint64_t seed,
                                        std::vector<TokenizedExample>& train, std::vector<TokenizedExample>& eval);

}  // namespace tune::data
