#include "tune/train/preference_loss.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "tune/core/error.h"

namespace tune::train {
namespace {

namespace F = torch::nn::functional;

torch::Tensor per_token(const torch::Tensor& sums, const torch::Tensor& tokens) { return sums / tokens.clamp_min(1.0); }

// log(1 - exp(x)) for x < 0, stable at both ends (Maechler's log1mexp).
torch::Tensor log1mexp(const torch::Tensor& x) {
  return torch::where(x > -0.6931471805599453, torch::log(-torch::expm1(x)), torch::log1p(-torch::exp(x)));
}

}  // namespace

const std::vector<std::string>& preference_loss_names() {
  static const std::vector<std::string> names = {"sigmoid", "hinge", "ipo", "robust", "simpo", "orpo"};
  return names;
}

PreferenceLossType preference_loss_from_name(const std::string& name) {
  static const std::vector<PreferenceLossType> types = {PreferenceLossType::sigmoid, PreferenceLossType::hinge,
                                                        PreferenceLossType::ipo,     PreferenceLossType::robust,
                                                        PreferenceLossType::simpo,   PreferenceLossType::orpo};
  const auto& names = preference_loss_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return types[i];
  }
  throw UsageError(fmt::format("unknown preference loss '{}'; valid: {}", name, fmt::join(names, ", ")));
}

bool needs_reference(PreferenceLossType type) {
  return type != PreferenceLossType::simpo && type != PreferenceLossType::orpo;
}

PreferenceLossTerms preference_loss(const PairLogps& policy, const PairLogps& reference,
                                    const PreferenceLossOptions& options) {
  const double beta = options.beta;
  const double smoothing = options.label_smoothing;
  const torch::Tensor chosen = policy.chosen.to(torch::kFloat32);
  const torch::Tensor rejected = policy.rejected.to(torch::kFloat32);
  PreferenceLossTerms terms;
  if (!needs_reference(options.type)) {
    const torch::Tensor chosen_avg = per_token(chosen, policy.chosen_tokens);
    const torch::Tensor rejected_avg = per_token(rejected, policy.rejected_tokens);
    if (options.type == PreferenceLossType::simpo) {
      // TRL's CPO: logits = m - gamma / beta, then the label-smoothed sigmoid loss of beta * logits.
      const torch::Tensor logits = beta * (chosen_avg - rejected_avg - options.simpo_gamma / beta);
      terms.per_pair = -F::logsigmoid(logits) * (1 - smoothing) - F::logsigmoid(-logits) * smoothing;
    } else {
      const torch::Tensor log_odds = (chosen_avg - rejected_avg) - (log1mexp(chosen_avg) - log1mexp(rejected_avg));
      terms.per_pair = -beta * F::logsigmoid(log_odds);
      if (!policy.chosen_whole.defined()) {
        throw Error("preference_loss: orpo needs the chosen sequences' whole log-probs (PairLogps::chosen_whole)");
      }
      terms.nll_sum = -policy.chosen_whole.to(torch::kFloat32).sum();
    }
    terms.chosen_rewards = (beta * chosen_avg).detach();
    terms.rejected_rewards = (beta * rejected_avg).detach();
    return terms;
  }
  const torch::Tensor chosen_ratio = chosen - reference.chosen.to(torch::kFloat32);
  const torch::Tensor rejected_ratio = rejected - reference.rejected.to(torch::kFloat32);
  const torch::Tensor delta = chosen_ratio - rejected_ratio;
  switch (options.type) {
    case PreferenceLossType::sigmoid: terms.per_pair = -F::logsigmoid(beta * delta); break;
    case PreferenceLossType::hinge: terms.per_pair = torch::relu(1 - beta * delta); break;
    case PreferenceLossType::ipo: {
      // Per-token averages of the log-ratios (TRL: "confirmed with the IPO authors").
      const torch::Tensor average = per_token(chosen_ratio, policy.chosen_tokens) -
                                    per_token(rejected_ratio, policy.rejected_tokens);
      terms.per_pair = (average - 1 / (2 * beta)).pow(2);
      break;
    }
    case PreferenceLossType::robust:
      terms.per_pair = (-(1 - smoothing) * F::logsigmoid(beta * delta) + smoothing * F::logsigmoid(-beta * delta)) /
                       (1 - 2 * smoothing);
      break;
    default: break;
  }
  terms.chosen_rewards = (beta * chosen_ratio).detach();
  terms.rejected_rewards = (beta * rejected_ratio).detach();
  return terms;
}

}  // namespace tune::train
