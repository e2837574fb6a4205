// Attribution tables (see attribution_table.h).
#include "tune/recipes/sft/attribution_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>

namespace tune::recipes::sft {
namespace {

// A token as one printable cell: control characters escaped so the table keeps its rows.
std::string printable_piece(const std::string& piece) {
  std::string shown;
  for (const char c : piece) {
    if (c == '\n') shown += "\\n";
    else if (c == '\t') shown += "\\t";
    else shown += c;
  }
  return shown;
}

}  // namespace

void print_attribution(const data::Tokenizer& tokenizer, const AttributionResult& result) {
  double max_norm = 0.0;
  for (const auto& token : result.prompt_tokens) max_norm = std::max(max_norm, token.grad_norm);
  std::cout << fmt::format("\nattribution of the output (log p = {:.4f}) to each prompt token:\n",
                           result.continuation_log_prob);
  std::cout << fmt::format("  {:>4}  {:<16} {:>11} {:>11}  {}\n", "pos", "token", "|grad|", "grad.emb", "");
  for (size_t i = 0; i < result.prompt_tokens.size(); ++i) {
    const auto& token = result.prompt_tokens[i];
    const int bar = max_norm > 0 ? static_cast<int>(std::lround(20.0 * token.grad_norm / max_norm)) : 0;
    std::cout << fmt::format("  {:>4}  {:<16} {:>11.4e} {:>11.4e}  {}\n", i, printable_piece(tokenizer.piece(token.token_id)),
                             token.grad_norm, token.grad_x_input, std::string(static_cast<size_t>(bar), '#'));
  }
}

}  // namespace tune::recipes::sft
