// Packing must not change what the model learns: every sample's loss inside a packed row (segment mask and
// per-segment positions from the SFT loader) equals its loss when run alone through the model.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <vector>

#include "tune/data/sft_loader.h"
#include "tune/models/llama.h"
#include "tune/train/loss.h"

namespace {

using tune::data::kIgnoreIndex;
using tune::data::TokenizedExample;

constexpr int64_t kVocab = 64;

tune::models::LlamaConfig tiny_config() {
  tune::models::LlamaConfig config;
  config.vocab_size = kVocab;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 256;
  return config;
}

// Random ids; the first `prompt` tokens carry no loss, as a chat template's prompt would.
TokenizedExample random_example(int64_t length, int64_t prompt) {
  const auto ids = torch::randint(1, kVocab, {length}, torch::kLong);
  TokenizedExample example;
  example.input_ids.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
  example.labels = example.input_ids;
  for (int64_t t = 0; t < prompt; ++t) example.labels[static_cast<size_t>(t)] = kIgnoreIndex;
  return example;
}

// Per-segment sums of next-token losses: position t is scored against labels[t + 1] and the sum goes to the
// segment of token t + 1. Written from log_softmax + gather, independently of train::causal_lm_loss_sum.
// Returns, per row, segment index -> loss sum.
std::vector<std::map<int64_t, double>> segment_losses(const torch::Tensor& logits, const torch::Tensor& labels,
                                                      const torch::Tensor& segment_ids) {
  const int64_t rows = logits.size(0);
  const int64_t time = logits.size(1);
  const auto log_probs = torch::log_softmax(logits.to(torch::kDouble), -1);
  const auto targets = labels.narrow(1, 1, time - 1);
  const auto counted = targets.ne(kIgnoreIndex);
  const auto token_loss = -log_probs.narrow(1, 0, time - 1)
                               .gather(2, targets.clamp_min(0).unsqueeze(2))
                               .squeeze(2)
                               .masked_fill(counted.logical_not(), 0.0);
  const auto target_segment = segment_ids.narrow(1, 1, time - 1);
  std::vector<std::map<int64_t, double>> result(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t t = 0; t < time - 1; ++t) {
      if (!counted[b][t].item<bool>()) continue;
      result[static_cast<size_t>(b)][target_segment[b][t].item<int64_t>()] += token_loss[b][t].item<double>();
    }
  }
  return result;
}

// The example a packed segment holds: lengths are all different, so the length finds it and the ids confirm it.
size_t find_example(const std::vector<TokenizedExample>& examples, const torch::Tensor& segment_ids) {
  for (size_t i = 0; i < examples.size(); ++i) {
    if (static_cast<int64_t>(examples[i].input_ids.size()) != segment_ids.size(0)) continue;
    const auto expected = torch::tensor(examples[i].input_ids, torch::kLong);
    REQUIRE(torch::equal(expected, segment_ids));
    return i;
  }
  FAIL("a packed segment matches no example");
  return 0;
}

}  // namespace

TEST_CASE("packed per-segment losses equal each sample's loss alone", "[recipes][packing]") {
  torch::manual_seed(2024);
  torch::NoGradGuard no_grad;
  tune::models::LlamaForCausalLM model(tiny_config());
  model->eval();

  const std::vector<int64_t> lengths = {23, 9, 31, 14, 5, 18};
  const std::vector<int64_t> prompts = {4, 2, 6, 3, 1, 5};
  std::vector<TokenizedExample> examples;
  for (size_t i = 0; i < lengths.size(); ++i) examples.push_back(random_example(lengths[i], prompts[i]));

  // Loss of every example alone: one row, default positions 0..L-1, no segments.
  std::vector<double> alone;
  for (const auto& example : examples) {
    const auto ids = torch::tensor(example.input_ids, torch::kLong).unsqueeze(0);
    const auto labels = torch::tensor(example.labels, torch::kLong).unsqueeze(0);
    alone.push_back(tune::train::causal_lm_loss_sum(model->forward(ids), labels).item<double>());
  }

  tune::data::LoaderOptions options;
  options.batch_size = 2;
  options.max_length = 48;  // room for two or three samples per row
  options.packing = true;
  options.shuffle = true;
  options.seed = 7;
  tune::data::SftLoader loader(examples, options);

  std::vector<int> seen(examples.size(), 0);
  double worst_relative = 0.0;
  double largest_unmasked_difference = 0.0;  // later segments, same batch without segment ids
  int64_t packed_rows = 0;
  const int64_t batches = loader.batches_per_epoch();
  for (int64_t n = 0; n < batches; ++n) {
    const auto batch = loader.next();
    const auto logits = model->forward(batch.input_ids, {batch.position_ids, batch.segment_ids});
    const auto packed = segment_losses(logits, batch.labels, batch.segment_ids);
    // The same rows with no segment mask and positions 0..T-1: later samples see the earlier ones.
    const auto unmasked_logits = model->forward(batch.input_ids);
    const auto unmasked = segment_losses(unmasked_logits, batch.labels, batch.segment_ids);

    for (int64_t b = 0; b < batch.input_ids.size(0); ++b) {
      const auto row_segments = batch.segment_ids[b];
      const int64_t segment_count = row_segments.max().item<int64_t>() + 1;
      if (segment_count > 1) ++packed_rows;
      for (int64_t s = 0; s < segment_count; ++s) {
        const auto where = row_segments.eq(s).nonzero().squeeze(1);
        // Positions restart at 0 for each sample: the loader's contract the model relies on.
        REQUIRE(torch::equal(batch.position_ids[b].index_select(0, where), torch::arange(where.size(0), torch::kLong)));
        const size_t example = find_example(examples, batch.input_ids[b].index_select(0, where));
        ++seen[example];
        const auto& row_losses = packed[static_cast<size_t>(b)];
        REQUIRE(row_losses.count(s) == 1);
        const double got = row_losses.at(s);
        const double relative = std::abs(got - alone[example]) / std::abs(alone[example]);
        INFO("batch " << n << " row " << b << " segment " << s << " (example " << example << "): packed " << got
                      << ", alone " << alone[example]);
        CHECK(relative < 1e-5);
        worst_relative = std::max(worst_relative, relative);
        if (s > 0) {
          const double difference =
              std::abs(unmasked[static_cast<size_t>(b)].at(s) - alone[example]) / std::abs(alone[example]);
          largest_unmasked_difference = std::max(largest_unmasked_difference, difference);
        }
      }
    }
  }
  WARN("packing: worst relative difference packed vs alone " << worst_relative
                                                             << "; without segment ids, largest on a later segment "
                                                             << largest_unmasked_difference);
  // Every example seen exactly once in the epoch, and at least one row really packed several samples.
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == 1);
  CHECK(packed_rows >= 1);
  // The comparison has teeth: without the segment mask, later samples' losses change measurably.
  CHECK(largest_unmasked_difference > 1e-3);
}
