// Candidate settings as overrides, and the ranking that picks the fastest setting that fits.
#include "tune/recipes/plan/budget_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace tune::recipes {

std::string checkpointing_label(const std::string& policy, int64_t k) {
  return policy == "every_k" ? fmt::format("every_k (k={})", k) : policy;
}

std::vector<std::string> checkpointing_overrides(const std::string& policy, int64_t k) {
  if (policy == "off") return {"gradient_checkpointing=false"};
  std::vector<std::string> keys = {"gradient_checkpointing=true", "checkpointing.policy=" + policy};
  if (policy == "every_k") keys.push_back(fmt::format("checkpointing.k={}", k));
  return keys;
}

std::string PlanSetting::checkpointing_label() const { return recipes::checkpointing_label(checkpointing, k); }

std::vector<std::string> PlanSetting::overrides() const {
  std::vector<std::string> keys = checkpointing_overrides(checkpointing, k);
  keys.push_back(fmt::format("training.batch_size={}", batch_size));
  keys.push_back(fmt::format("training.gradient_accumulation_steps={}", accumulation));
  keys.push_back("param_dtype=" + param_dtype);
  return keys;
}

int64_t PeakBreakdown::peak() const {
  return parameters + optimizer_state + std::max(step, gradients + optimizer_step);
}

const PlanRow& BudgetPlan::smallest_row() const {
  return *std::min_element(rows.begin(), rows.end(),
                           [](const PlanRow& a, const PlanRow& b) { return a.peak_bytes < b.peak_bytes; });
}

void rank_and_choose(BudgetPlan& plan, const std::string& preferred_param_dtype) {
  auto key = [&](const PlanRow& row) {
    // Relative times equal to rounding (every_k settings of equal cost, policies whose recompute is the same FLOPs)
    // compare equal, so the tie-breaks decide.
    const double time = std::round(row.relative_time * 1e6) / 1e6;
    return std::make_tuple(time, -row.setting.batch_size, row.setting.param_dtype != preferred_param_dtype,
                           row.peak_bytes);
  };
  std::stable_sort(plan.rows.begin(), plan.rows.end(),
                   [&](const PlanRow& a, const PlanRow& b) { return key(a) < key(b); });
  plan.chosen.reset();
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    plan.rows[i].fits = plan.rows[i].peak_bytes <= static_cast<int64_t>(plan.budget_bytes);
    if (plan.rows[i].fits && !plan.chosen) plan.chosen = i;
  }
}

}  // namespace tune::recipes
