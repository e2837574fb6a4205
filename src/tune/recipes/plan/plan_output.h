// How a BudgetPlan is shown: the table `tune plan` prints, its JSON form (--json), the message when nothing fits,
// and the lines `tune train --memory-budget` logs about its choice.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tune/recipes/plan/budget_plan.h"

namespace tune::recipes {

// Header, the settings that fit (fastest first, the chosen one marked *), and the chosen row's breakdown.
std::string plan_table(const BudgetPlan& plan);

nlohmann::json plan_to_json(const BudgetPlan& plan);

// Nothing fits: by how much (the smallest predicted peak against the budget), and what would, computed.
std::string nothing_fits_message(const BudgetPlan& plan);

// One paragraph: what was chosen and why (the fastest that fits; what the faster ones would need).
std::string describe_choice(const BudgetPlan& plan);

}  // namespace tune::recipes
