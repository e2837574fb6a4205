// The gradient-enabled sampling plan: ranking and its text and JSON forms (inference_plan.h).
#include "tune/recipes/plan/inference_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <tuple>

#include "tune/core/progress.h"
#include "tune/recipes/plan/budget_plan.h"

namespace tune::recipes {
namespace {

std::string bytes(int64_t value) { return format_bytes(static_cast<double>(value)); }

std::string sample_label(const InferencePlanRow& row) {
  return fmt::format("{} x {}x{}{}", row.frames, row.width, row.height, row.cfg ? ", CFG" : "");
}

auto sample_key(const InferencePlanRow& row) { return std::make_tuple(row.frames, row.height, row.width, row.cfg); }

}  // namespace

std::string InferencePlanRow::checkpointing_label() const { return recipes::checkpointing_label(checkpointing, k); }

std::vector<std::string> InferencePlanRow::overrides(bool with_shape) const {
  std::vector<std::string> keys = checkpointing_overrides(checkpointing, k);
  if (!with_shape) return keys;
  keys.push_back(fmt::format("sampling.frames={}", frames));
  keys.push_back(fmt::format("sampling.height={}", height));
  keys.push_back(fmt::format("sampling.width={}", width));
  return keys;
}

void rank_and_choose(InferencePlan& plan) {
  auto key = [](const InferencePlanRow& row) {
    return std::make_tuple(sample_key(row), std::round(row.relative_time * 1e6) / 1e6, row.peak_bytes);
  };
  std::stable_sort(plan.rows.begin(), plan.rows.end(),
                   [&](const InferencePlanRow& a, const InferencePlanRow& b) { return key(a) < key(b); });
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    auto& row = plan.rows[i];
    row.fits = row.peak_bytes <= static_cast<int64_t>(plan.budget_bytes);
    const bool earlier_fit = std::any_of(plan.rows.begin(), plan.rows.begin() + static_cast<std::ptrdiff_t>(i),
                                         [&](const InferencePlanRow& other) {
                                           return other.fits && sample_key(other) == sample_key(row);
                                         });
    row.best = row.fits && !earlier_fit;
  }
}

bool InferencePlan::requested_fit() const {
  for (const InferencePlanRow& row : rows) {
    if (!row.requested) continue;
    const bool fits = std::any_of(rows.begin(), rows.end(), [&](const InferencePlanRow& other) {
      return other.fits && sample_key(other) == sample_key(row);
    });
    if (!fits) return false;
  }
  return true;
}

std::string inference_plan_table(const InferencePlan& plan) {
  std::string out = fmt::format("gradient-enabled sampling plan (tune infer --grad, {} recipe): {}\n", plan.recipe,
                                plan.model);
  out += fmt::format("  {} on {}, {} {}{}; budget {}\n", plan.precision, plan.device, plan.prompts, plan.batch_unit,
                     plan.prompts > 1 ? "s" : "", bytes(static_cast<int64_t>(plan.budget_bytes)));
  if (plan.text_phase_bytes > 0) {
    out += fmt::format("  text encoding first: {} (freed before denoising); the VAE's decoding afterwards is not "
                       "planned\n", bytes(plan.text_phase_bytes));
  } else {
    out += "  no text encoder; the VAE's decoding afterwards is not planned\n";
  }
  out += fmt::format("  relative time: {}\n\n", plan.time_model);
  out += fmt::format("  {:<24} {:<15} {:>12} {:>14} {:>14} {:>9}  {}\n", "frames x size", "checkpointing", "weights",
                     "activations", "predicted peak", "rel. time", "fits");
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const InferencePlanRow& row = plan.rows[i];
    out += fmt::format("{} {:<24} {:<15} {:>12} {:>14} {:>14} {:>9.3f}  {}\n", row.best ? "*" : " ",
                       sample_label(row), row.checkpointing_label(), bytes(row.weights_bytes),
                       bytes(row.activations_bytes), bytes(row.peak_bytes), row.relative_time, row.fits ? "yes" : "no");
  }
  out += "\n* = the fastest policy that fits for each sample";
  for (const InferencePlanRow& row : plan.rows) {
    if (row.best && row.requested) {
      out += fmt::format("\n  {}: {}", sample_label(row), fmt::join(row.overrides(plan.shape_settable), " "));
    }
  }
  return out + "\n";
}

nlohmann::json inference_plan_to_json(const InferencePlan& plan) {
  nlohmann::json rows = nlohmann::json::array();
  for (const InferencePlanRow& row : plan.rows) {
    rows.push_back({{"checkpointing", row.checkpointing},
                    {"k", row.checkpointing == "every_k" ? nlohmann::json(row.k) : nlohmann::json(nullptr)},
                    {"frames", row.frames},
                    {"height", row.height},
                    {"width", row.width},
                    {"cfg", row.cfg},
                    {"batch", (row.cfg ? 2 : 1) * plan.prompts},
                    {"weights_bytes", row.weights_bytes},
                    {"activations_bytes", row.activations_bytes},
                    {"denoise_peak_bytes", row.denoise_peak_bytes},
                    {"peak_bytes", row.peak_bytes},
                    {"relative_time", row.relative_time},
                    {"fits", row.fits},
                    {"best", row.best},
                    {"requested", row.requested},
                    {"overrides", row.overrides(plan.shape_settable)}});
  }
  return {{"recipe", plan.recipe},
          {"mode", "infer --grad"},
          {"model", plan.model},
          {"precision", plan.precision},
          {"device", plan.device},
          {"budget_bytes", plan.budget_bytes},
          {"prompts", plan.prompts},
          {"batch_unit", plan.batch_unit},
          {"text_phase_bytes", plan.text_phase_bytes},
          {"time_model", plan.time_model},
          {"rows", rows},
          {"requested_fit", plan.requested_fit()}};
}

std::string inference_nothing_fits_message(const InferencePlan& plan) {
  std::vector<std::string> missing, fitting;
  for (const InferencePlanRow& row : plan.rows) {
    if (row.best) fitting.push_back(sample_label(row) + " with " + row.checkpointing_label());
    if (!row.requested || row.checkpointing != "full") continue;  // full: each sample's smallest peak
    const bool fits = std::any_of(plan.rows.begin(), plan.rows.end(), [&](const InferencePlanRow& other) {
      return other.fits && sample_key(other) == sample_key(row);
    });
    if (fits) continue;
    std::string why = fmt::format("{} needs {} with checkpointing full, {} over", sample_label(row),
                                  bytes(row.peak_bytes), bytes(row.peak_bytes - static_cast<int64_t>(plan.budget_bytes)));
    if (row.peak_bytes == plan.text_phase_bytes) why += " (the text encoder alone)";
    missing.push_back(why);
  }
  std::string message = fmt::format("in {}, sampling with gradients does not fit at any checkpointing policy: {}",
                                    bytes(static_cast<int64_t>(plan.budget_bytes)), fmt::join(missing, "; "));
  if (!fitting.empty()) message += fmt::format("\nwhat fits: {}", fmt::join(fitting, "; "));
  return message;
}

}  // namespace tune::recipes
