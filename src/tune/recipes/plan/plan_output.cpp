// Text and JSON forms of a BudgetPlan (plan_output.h).
#include "tune/recipes/plan/plan_output.h"

#include <fmt/format.h>

#include "tune/core/progress.h"

namespace tune::recipes {
namespace {

std::string bytes(int64_t value) { return format_bytes(static_cast<double>(value)); }

std::string short_setting(const PlanSetting& setting) {
  return fmt::format("{}, micro-batch {} x {} accumulation, param_dtype {}{}", setting.checkpointing_label(),
                     setting.batch_size, setting.accumulation, setting.param_dtype,
                     setting.processes > 1 ? fmt::format(", {} x {}", setting.strategy(), setting.processes) : "");
}

std::string breakdown_line(const PeakBreakdown& b) {
  std::string line = fmt::format("parameters {} + optimizer state {} + forward/backward {} (activations {}, "
                                 "gradients up to {}, batch/buckets {})",
                                 bytes(b.parameters), bytes(b.optimizer_state), bytes(b.step), bytes(b.activations),
                                 bytes(b.gradients), bytes(b.other));
  if (b.gradients + b.optimizer_step > b.step) {
    line += fmt::format("; the optimizer update peaks higher (every gradient + its temporaries {})", bytes(b.optimizer_step));
  }
  return line;
}

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : " ") + item;
  return text;
}

nlohmann::json row_json(const PlanRow& row) {
  const PlanSetting& s = row.setting;
  return {{"checkpointing", s.checkpointing},
          {"k", s.checkpointing == "every_k" ? nlohmann::json(s.k) : nlohmann::json(nullptr)},
          {"batch_size", s.batch_size},
          {"gradient_accumulation_steps", s.accumulation},
          {"param_dtype", s.param_dtype},
          {"strategy", s.strategy()},
          {"processes", s.processes},
          {"peak_bytes", row.peak_bytes},
          {"breakdown",
           {{"parameters", row.breakdown.parameters},
            {"gradients", row.breakdown.gradients},
            {"optimizer_state", row.breakdown.optimizer_state},
            {"activations", row.breakdown.activations},
            {"other", row.breakdown.other},
            {"step", row.breakdown.step},
            {"optimizer_step", row.breakdown.optimizer_step}}},
          {"relative_time", row.relative_time},
          {"fits", row.fits},
          {"overrides", s.overrides()}};
}

}  // namespace

std::string plan_table(const BudgetPlan& plan) {
  std::string out = fmt::format("memory plan ({} recipe): {}\n", plan.recipe, plan.model);
  out += fmt::format("  {} on {}, {} process{}{}; global batch {} {} x {} tokens per step; budget {} per process\n",
                     plan.precision, plan.device, plan.processes, plan.processes > 1 ? "es" : "",
                     plan.processes > 1 && !plan.rows.empty() ? " (strategy " + plan.rows[0].setting.strategy() + ")" : "",
                     plan.global_batch, plan.batch_unit, plan.sequence,
                     bytes(static_cast<int64_t>(plan.budget_bytes)));
  out += fmt::format("  relative time: {}\n\n", plan.time_model);
  out += fmt::format("  {:<15} {:>11} {:>6}  {:<12} {:<13} {:>14} {:>10}\n", "checkpointing", "micro-batch", "accum",
                     "param_dtype", "strategy", "predicted peak", "rel. time");
  size_t fitting = 0;
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const PlanRow& row = plan.rows[i];
    if (!row.fits) continue;
    ++fitting;
    out += fmt::format("{} {:<15} {:>11} {:>6}  {:<12} {:<13} {:>14} {:>10.3f}\n", plan.chosen == i ? "*" : " ",
                       row.setting.checkpointing_label(), row.setting.batch_size, row.setting.accumulation,
                       row.setting.param_dtype, row.setting.strategy(), bytes(row.peak_bytes), row.relative_time);
  }
  if (fitting == 0) out += "  (none fits)\n";
  out += fmt::format("\n{} of {} settings fit", fitting, plan.rows.size());
  if (const PlanRow* chosen = plan.chosen_row()) {
    out += "; * = the fastest that fits:\n  " + joined(chosen->setting.overrides()) + "\n";
    out += "  predicted peak " + bytes(chosen->peak_bytes) + " = " + breakdown_line(chosen->breakdown) + "\n";
  } else {
    out += "\n";
  }
  return out;
}

nlohmann::json plan_to_json(const BudgetPlan& plan) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PlanRow& row : plan.rows) rows.push_back(row_json(row));
  nlohmann::json alternatives = nlohmann::json::array();
  for (const PlanAlternative& alternative : plan.alternatives) {
    alternatives.push_back({{"change", alternative.description},
                            {"overrides", alternative.overrides},
                            {"fits", alternative.fits},
                            {"best", row_json(alternative.best)},
                            {"note", alternative.note}});
  }
  const PlanRow& smallest = plan.smallest_row();
  return {{"recipe", plan.recipe},
          {"model", plan.model},
          {"precision", plan.precision},
          {"device", plan.device},
          {"budget_bytes", plan.budget_bytes},
          {"processes", plan.processes},
          {"global_batch", plan.global_batch},
          {"batch_unit", plan.batch_unit},
          {"sequence", plan.sequence},
          {"time_model", plan.time_model},
          {"rows", rows},
          {"chosen", plan.chosen ? nlohmann::json(*plan.chosen) : nlohmann::json(nullptr)},
          {"smallest_peak_bytes", smallest.peak_bytes},
          {"alternatives", alternatives}};
}

std::string nothing_fits_message(const BudgetPlan& plan) {
  const PlanRow& smallest = plan.smallest_row();
  const int64_t budget = static_cast<int64_t>(plan.budget_bytes);
  std::string message = fmt::format(
      "no setting fits in {} per process: the smallest predicted peak is {} ({}), {} ({:.0f}%) over the budget",
      bytes(budget), bytes(smallest.peak_bytes), short_setting(smallest.setting), bytes(smallest.peak_bytes - budget),
      100.0 * static_cast<double>(smallest.peak_bytes - budget) / static_cast<double>(std::max<int64_t>(budget, 1)));
  bool any = false;
  for (const PlanAlternative& alternative : plan.alternatives) {
    if (!alternative.fits) continue;
    if (!any) message += "\nwhat would fit (predicted again with the change):";
    any = true;
    message += fmt::format("\n  {} [{}]: peak {} with {}, relative time {:.3f}{}", alternative.description,
                           joined(alternative.overrides), bytes(alternative.best.peak_bytes),
                           short_setting(alternative.best.setting), alternative.best.relative_time,
                           alternative.note.empty() ? "" : " (" + alternative.note + ")");
  }
  for (const PlanAlternative& alternative : plan.alternatives) {
    if (alternative.fits) continue;
    message += fmt::format("\n  not enough alone: {} (smallest peak {})", alternative.description,
                           bytes(alternative.best.peak_bytes));
  }
  if (!any) message += "\nnothing the planner tried fits: a larger budget, or a smaller model";
  return message;
}

std::string describe_choice(const BudgetPlan& plan) {
  const PlanRow* chosen = plan.chosen_row();
  if (chosen == nullptr) return nothing_fits_message(plan);
  size_t fitting = 0;
  for (const PlanRow& row : plan.rows) fitting += row.fits ? 1 : 0;
  std::string text = fmt::format(
      "memory budget {} per process: chose {} (predicted peak {}, relative step time {:.3f} by the FLOP model), "
      "the fastest of the {} of {} settings that fit",
      bytes(static_cast<int64_t>(plan.budget_bytes)), short_setting(chosen->setting), bytes(chosen->peak_bytes),
      chosen->relative_time, fitting, plan.rows.size());
  if (*plan.chosen > 0) {
    const PlanRow& faster = plan.rows[*plan.chosen - 1];
    text += fmt::format("; the next faster, {}, predicts {}", short_setting(faster.setting), bytes(faster.peak_bytes));
  }
  return text + "\nmemory budget overrides: " + joined(chosen->setting.overrides());
}

}  // namespace tune::recipes
