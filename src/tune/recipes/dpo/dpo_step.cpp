#include "tune/recipes/dpo/dpo_step.h"

#include "tune/core/error.h"
#include "tune/data/sft_dataset.h"
#include "tune/nn/lora_linear.h"
#include "tune/train/sequence_logps.h"

namespace tune::recipes::dpo {

namespace {

// The chosen sequences' tokens after their first (what orpo's NLL scores).
torch::Tensor chosen_after_first(const data::PreferenceBatch& batch) {
  return batch.sequence_ids.ge(0) & batch.sequence_ids.lt(batch.pairs) & batch.position_ids.gt(0);
}

// Every token of the chosen sequences after the first as a label.
torch::Tensor whole_chosen_labels(const data::PreferenceBatch& batch) {
  return torch::where(chosen_after_first(batch), batch.input_ids, torch::full_like(batch.input_ids, data::kIgnoreIndex));
}

}  // namespace

train::PairLogps pair_logps(models::LlamaForCausalLM& model, const data::PreferenceBatch& batch,
                            const torch::Device& device, bool whole_chosen) {
  const models::AttentionInputs attention{batch.position_ids.to(device), batch.segment_ids.to(device)};
  const torch::Tensor hidden = model->forward_hidden(batch.input_ids.to(device), attention);
  const torch::Tensor weight = model->output_weight();
  const double softcap = model->output_softcap();
  // Per sequence, whether each row holds one (chosen rows first) or several (pack_pairs).
  const int64_t pairs = batch.pairs;
  const torch::Tensor sequence_ids = batch.sequence_ids.to(device);
  const train::SequenceLogps sequences = train::causal_lm_sequence_logps(
      hidden, weight, batch.labels.to(device), sequence_ids, 2 * pairs, /*chunk_rows=*/0, softcap);
  train::PairLogps logps{sequences.sums.slice(0, 0, pairs), sequences.sums.slice(0, pairs, 2 * pairs),
                         sequences.counts.slice(0, 0, pairs), sequences.counts.slice(0, pairs, 2 * pairs)};
  if (whole_chosen) {
    const train::SequenceLogps chosen = train::causal_lm_sequence_logps(
        hidden, weight, whole_chosen_labels(batch).to(device), sequence_ids, 2 * pairs, /*chunk_rows=*/0, softcap);
    logps.chosen_whole = chosen.sums.slice(0, 0, pairs);
    logps.chosen_whole_tokens = chosen.counts.slice(0, 0, pairs);
  }
  return logps;
}

int64_t chosen_sequence_tokens(const data::PreferenceBatch& batch) {
  return chosen_after_first(batch).sum().item<int64_t>();
}

train::PairLogps reference_pair_logps(models::LlamaForCausalLM& policy, models::LlamaForCausalLM* reference,
                                      const data::PreferenceBatch& batch, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  if (reference != nullptr) return pair_logps(*reference, batch, device);
  // The base alone: with the adapters off nothing random is left (LoRA's dropout is on the adapter's input only).
  const nn::LoraAdaptersOff base_only;
  return pair_logps(policy, batch, device);
}

train::PairLogps stored_reference_logps(const data::PreferenceBatch& batch, const torch::Device& device) {
  if (!batch.reference_chosen.defined()) {
    throw Error("dpo: a batch has no precomputed reference log-probs (dpo.precompute_reference)");
  }
  train::PairLogps logps;
  logps.chosen = batch.reference_chosen.to(device);
  logps.rejected = batch.reference_rejected.to(device);
  return logps;
}

void PreferenceTally::add(const train::PreferenceLossTerms& terms, const train::PairLogps& policy,
                          train::PreferenceLossType type) {
  const torch::Tensor chosen = terms.chosen_rewards.to(torch::kDouble).cpu();
  const torch::Tensor rejected = terms.rejected_rewards.to(torch::kDouble).cpu();
  pairs += static_cast<double>(chosen.numel());
  rewards_chosen += chosen.sum().item<double>();
  rewards_rejected += rejected.sum().item<double>();
  accuracies += chosen.gt(rejected).sum().item<double>();
  margins += (chosen - rejected).sum().item<double>();
  const bool averaged = !train::needs_reference(type);
  const torch::Tensor chosen_logps = (averaged ? policy.chosen / policy.chosen_tokens.clamp_min(1.0) : policy.chosen);
  const torch::Tensor rejected_logps =
      (averaged ? policy.rejected / policy.rejected_tokens.clamp_min(1.0) : policy.rejected);
  logps_chosen += chosen_logps.detach().to(torch::kDouble).sum().item<double>();
  logps_rejected += rejected_logps.detach().to(torch::kDouble).sum().item<double>();
  if (policy.chosen_whole_tokens.defined()) {
    chosen_tokens += policy.chosen_whole_tokens.to(torch::kDouble).sum().item<double>();
  }
  pair_loss += terms.per_pair.detach().to(torch::kDouble).sum().item<double>();
  if (terms.nll_sum.defined()) nll += terms.nll_sum.detach().to(torch::kDouble).item<double>();
}

void PreferenceTally::merge(const PreferenceTally& other) {
  const std::vector<double> mine = values(), theirs = other.values();
  std::vector<double> sum(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) sum[i] = mine[i] + theirs[i];
  *this = from_values(sum);
}

double PreferenceTally::loss() const {
  const double pair_term = pair_loss / std::max(1.0, pairs);
  return nll != 0 ? pair_term + nll / std::max(1.0, chosen_tokens) : pair_term;
}

std::vector<std::pair<std::string, double>> PreferenceTally::means() const {
  const double n = std::max(1.0, pairs);
  std::vector<std::pair<std::string, double>> out = {
      {"rewards/chosen", rewards_chosen / n},   {"rewards/rejected", rewards_rejected / n},
      {"rewards/accuracies", accuracies / n},   {"rewards/margins", margins / n},
      {"logps/chosen", logps_chosen / n},       {"logps/rejected", logps_rejected / n}};
  if (nll != 0) out.emplace_back("nll_loss", nll / std::max(1.0, chosen_tokens));
  return out;
}

std::vector<double> PreferenceTally::values() const {
  return {pairs, chosen_tokens, rewards_chosen, rewards_rejected, accuracies, margins, logps_chosen, logps_rejected,
          pair_loss, nll};
}

PreferenceTally PreferenceTally::from_values(const std::vector<double>& v) {
  PreferenceTally tally;
  tally.pairs = v.at(0);
  tally.chosen_tokens = v.at(1);
  tally.rewards_chosen = v.at(2);
  tally.rewards_rejected = v.at(3);
  tally.accuracies = v.at(4);
  tally.margins = v.at(5);
  tally.logps_chosen = v.at(6);
  tally.logps_rejected = v.at(7);
  tally.pair_loss = v.at(8);
  tally.nll = v.at(9);
  return tally;
}

}  // namespace tune::recipes::dpo
