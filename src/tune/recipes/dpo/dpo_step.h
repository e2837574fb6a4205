// One preference batch through the model: the policy's and the reference's per-pair log-probabilities, the loss
// terms, and the figures TRL logs. Shared by `tune train` (dpo_train.cpp) and the parity tests against TRL.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "tune/data/preference_loader.h"
#include "tune/models/llama.h"
#include "tune/train/preference_loss.h"

namespace tune::recipes::dpo {

// The pairs' completion log-probs under `model` (chosen rows first), through the chunked output layer: the fp32
// [tokens, vocab] log-softmax is never whole. Runs under the caller's grad mode and autocast. `whole_chosen` also
// scores every token of the chosen sequences (prompt included: orpo's NLL term), reusing the same hidden states.
train::PairLogps pair_logps(models::LlamaForCausalLM& model, const data::PreferenceBatch& batch,
                            const torch::Device& device, bool whole_chosen = false);

// Tokens after the first of each chosen sequence (what `whole_chosen` scores), summed: orpo's NLL denominator.
int64_t chosen_sequence_tokens(const data::PreferenceBatch& batch);

// The reference's, without gradients or kept activations: `reference` when given (a full fine-tune's frozen copy),
// else `policy` with its LoRA adapters switched off (the base it started from).
train::PairLogps reference_pair_logps(models::LlamaForCausalLM& policy, models::LlamaForCausalLM* reference,
                                      const data::PreferenceBatch& batch, const torch::Device& device);

// The batch's precomputed reference log-probs (dpo.precompute_reference, reference_logps.h) as PairLogps on
// `device`; throws if the batch has none.
train::PairLogps stored_reference_logps(const data::PreferenceBatch& batch, const torch::Device& device);

// Sums over pairs of what TRL logs as batch means: rewards/chosen, rewards/rejected, rewards/accuracies,
// rewards/margins, logps/chosen, logps/rejected (summed completion log-probs; for simpo and orpo the per-token
// averages those losses use, as TRL's CPO and ORPO trainers log them), and the loss terms.
struct PreferenceTally {
  double pairs = 0, chosen_tokens = 0;  // chosen_tokens: the NLL's tokens (orpo)
  double rewards_chosen = 0, rewards_rejected = 0, accuracies = 0, margins = 0, logps_chosen = 0, logps_rejected = 0;
  double pair_loss = 0, nll = 0;  // sums: of the per-pair losses; orpo: of the chosen tokens' NLL
  void add(const train::PreferenceLossTerms& terms, const train::PairLogps& policy, train::PreferenceLossType type);
  void merge(const PreferenceTally& other);
  // The loss as the step normalises it: pair_loss / pairs (+ nll / chosen tokens for orpo).
  double loss() const;
  std::vector<std::pair<std::string, double>> means() const;  // TRL's names
  std::vector<double> values() const;            // for a sum over ranks
  static PreferenceTally from_values(const std::vector<double>& values);
};

}  // namespace tune::recipes::dpo
