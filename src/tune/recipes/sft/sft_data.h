// Reading, tokenizing and splitting the SFT dataset as the recipe's settings say.
#pragma once

#include <vector>

#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"
#include "tune/recipes/sft/sft_settings.h"

namespace tune::recipes::sft {

struct PreparedData {
  std::vector<data::TokenizedExample> train;
  std::vector<data::TokenizedExample> eval;
};

PreparedData prepare_data(const DataSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed);

}  // namespace tune::recipes::sft
