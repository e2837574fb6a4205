// `tune plan` and the --memory-budget of `tune train` (plan_command.h).
#include "tune/recipes/plan/plan_command.h"

#include <algorithm>
#include <iostream>

#include "tune/config/config.h"
#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/distributed/launch_environment.h"
#include "tune/io/sharded_safetensors.h"
#include "tune/recipes/commands.h"
#include "tune/recipes/plan/plan_output.h"
#include "tune/recipes/recipe.h"

namespace tune::recipes {
namespace {

BudgetPlan make_plan(const std::filesystem::path& file, const std::vector<std::string>& overrides, uint64_t budget,
                     int processes) {
  if (!std::filesystem::is_regular_file(file)) {
    throw UsageError(fmt::format("{}: no such recipe file (see `tune ls` for the shipped recipes)", file.string()));
  }
  const Recipe& recipe = find_recipe(config::peek_recipe_name(file, overrides));
  config::Config config = config::load(file, overrides, recipe.schema());
  if (!recipe.plan) {
    throw UsageError(fmt::format("recipe '{}' has no memory planner yet: tune plan and --memory-budget cover the sft "
                                 "recipe", recipe.name));
  }
  return recipe.plan({std::move(config), budget, std::max(1, processes)});
}

}  // namespace

uint64_t parse_memory_budget(const std::string& text, const std::string& flag) {
  const auto bytes = io::parse_byte_size(text);
  // Above 2^60 bytes (1 EiB) is no machine's memory, and the signed byte counts of the plan stay far from overflow.
  if (!bytes || *bytes == 0 || *bytes > (uint64_t{1} << 60)) {
    throw UsageError(fmt::format("{} '{}': expected a memory size above zero such as 16GiB, 500MB or 8GB (KB/MB/GB "
                                 "decimal, KiB/MiB/GiB binary, or plain bytes)", flag, text));
  }
  return *bytes;
}

std::vector<std::string> overrides_for_memory_budget(const std::filesystem::path& recipe,
                                                     const std::vector<std::string>& overrides,
                                                     const std::string& budget, int processes, bool announce) {
  const BudgetPlan plan = make_plan(recipe, overrides, parse_memory_budget(budget, "--memory-budget"), processes);
  const PlanRow* chosen = plan.chosen_row();
  if (chosen == nullptr) throw Error(nothing_fits_message(plan));
  if (announce) {
    const std::string text = describe_choice(plan);
    size_t begin = 0;
    while (begin <= text.size()) {  // one log line per line of the description
      const size_t end = std::min(text.find('\n', begin), text.size());
      log::info("{}", text.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  std::vector<std::string> result = overrides;
  for (const auto& item : chosen->setting.overrides()) result.push_back(item);
  return result;
}

std::vector<std::string> apply_memory_budget(const TrainArguments& arguments) {
  if (!arguments.memory_budget) return arguments.overrides;
  const auto environment = distributed::read_launch_environment();
  const int processes = arguments.nproc > 1 ? arguments.nproc : environment ? environment->world_size : 1;
  const bool announce = arguments.nproc <= 1 && (!environment || environment->rank == 0);
  return overrides_for_memory_budget(arguments.recipe, arguments.overrides, *arguments.memory_budget, processes,
                                     announce);
}

int run_plan(const PlanArguments& arguments) {
  const uint64_t budget = parse_memory_budget(arguments.memory, "--memory");
  const BudgetPlan plan = make_plan(arguments.recipe, arguments.overrides, budget, arguments.nproc);
  if (arguments.json) {
    std::cout << plan_to_json(plan).dump(2) << "\n";
  } else {
    std::cout << plan_table(plan);
  }
  if (plan.chosen) return 0;
  std::cerr << "error: " << nothing_fits_message(plan) << "\n";
  return 1;
}

}  // namespace tune::recipes
