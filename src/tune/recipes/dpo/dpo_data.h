// Reading, tokenizing and splitting the preference data as the DPO recipe's settings say.
#pragma once

#include <vector>

#include "tune/data/preference_dataset.h"
#include "tune/data/tokenizer.h"
#include "tune/recipes/sft/sft_settings.h"

namespace tune::recipes::dpo {

struct PreparedPairs {
  std::vector<data::TokenizedPair> train, eval;
  std::vector<double> file_weights;  // data.train's weights, by TokenizedPair::file_index
};

// Every row of every file is read and validated first (a bad row stops the run before anything trains), then
// tokenized through data.template; the counts (rows, skipped, truncated, dropped) are logged.
PreparedPairs prepare_pairs(const sft::DataSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed);

}  // namespace tune::recipes::dpo
