// The per-prompt-token attribution of a generated answer as a table on stdout (tune infer --grad, tune chat).
#pragma once

#include "tune/data/tokenizer.h"
#include "tune/recipes/sft/generate.h"

namespace tune::recipes::sft {

void print_attribution(const data::Tokenizer& tokenizer, const AttributionResult& result);

}  // namespace tune::recipes::sft
