// Reading, tokenizing and splitting the SFT dataset as the recipe's settings say.
#pragma once

#include <vector>

#include "tune/data/dataset_mixture.h"
#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"
#include "tune/recipes/sft/sft_settings.h"

namespace tune::recipes::sft {

struct PreparedData {
  data::MixedExamples train;  // with the weights of data.train's files (the loader draws each epoch from them)
  std::vector<data::TokenizedExample> eval;
};

// Reads and validates every row of every file first (a bad row anywhere stops the run before any tokenizing, and
// before training), then tokenizes: conversations through the chat template, raw text (format text) into chunks.
PreparedData prepare_data(const DataSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed);

// What one epoch draws from each of data.train's files (`counts`: the training items each holds), so a mixture's
// proportions are visible before training; nothing for a single unweighted file. `items`: "training examples".
void log_mixture(const DataSettings& settings, const std::vector<int64_t>& counts, const std::string& items);

}  // namespace tune::recipes::sft
