// Preference losses over per-sequence log-probabilities, as TRL computes them (trl 1.16: DPOTrainer._compute_loss
// for sigmoid, hinge, ipo and robust; the experimental CPO trainer's simpo; the experimental ORPO trainer's
// odds-ratio loss). With d = (log pi(y+) - log ref(y+)) - (log pi(y-) - log ref(y-)) over a pair's completion:
//   sigmoid  -log sigmoid(beta d)                                   (DPO)
//   hinge    relu(1 - beta d)                                        (SLiC)
//   ipo      (d_avg - 1 / (2 beta))^2, d_avg from per-token averages (IPO, length-normalised as TRL)
//   robust   (-(1 - e) log sigmoid(beta d) + e log sigmoid(-beta d)) / (1 - 2e), e = label_smoothing
//   simpo    -(1 - e) log sigmoid(beta m - gamma) - e log sigmoid(-(beta m - gamma)), m = difference of the
//            per-token average log-probs of the policy (no reference)
//   orpo     NLL of the chosen sequence - beta log sigmoid(log odds(y+) - log odds(y-)), odds from the completion's
//            per-token average log-prob p as p / (1 - p) (no reference); TRL's ORPO takes that NLL over the whole
//            chosen sequence, prompt included, and so does this (the paper's is over the response)
// Rewards (logged as TRL logs them): beta (log pi - log ref) of each completion; for simpo and orpo beta times the
// policy's per-token average log-prob.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

namespace tune::train {

enum class PreferenceLossType { sigmoid, hinge, ipo, robust, simpo, orpo };

// "sigmoid", ...; throws tune::UsageError listing the names.
PreferenceLossType preference_loss_from_name(const std::string& name);
const std::vector<std::string>& preference_loss_names();
bool needs_reference(PreferenceLossType type);  // false for simpo and orpo

struct PreferenceLossOptions {
  PreferenceLossType type = PreferenceLossType::sigmoid;
  double beta = 0.1;
  double label_smoothing = 0.0;  // robust and simpo
  double simpo_gamma = 0.5;
};

// One side of the pairs: per-pair sums of the completion's log-probs and the completion's token counts.
struct PairLogps {
  torch::Tensor chosen, rejected;                // [P] float32 sums
  torch::Tensor chosen_tokens, rejected_tokens;  // [P] float32
  // orpo only: the chosen sequences' log-probs over every token after the first, prompt included (TRL's ORPO takes
  // its NLL term over the whole chosen sequence), and how many tokens that is.
  torch::Tensor chosen_whole, chosen_whole_tokens;  // [P] float32
};

struct PreferenceLossTerms {
  // The per-pair loss [P] (differentiable): the loss of a batch is its sum over the step's pairs divided by their
  // number (TRL's mean), plus, for orpo, nll_sum over the step's chosen-sequence tokens divided by their number.
  torch::Tensor per_pair;
  torch::Tensor nll_sum;  // orpo: minus policy.chosen_whole summed (differentiable); else undefined
  torch::Tensor chosen_rewards, rejected_rewards;  // [P], detached
};

// `reference` is ignored (may be empty) for simpo and orpo. Computed in float32.
PreferenceLossTerms preference_loss(const PairLogps& policy, const PairLogps& reference,
                                    const PreferenceLossOptions& options);

}  // namespace tune::train
