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
#include "tune/recipes/plan/inference_plan.h"
#include "tune/recipes/plan/plan_output.h"
#include "tune/recipes/recipe.h"

namespace tune::recipes {
namespace {

std::pair<const Recipe*, config::Config> load_recipe(const std::filesystem::path& file,
                                                     const std::vector<std::string>& overrides) {
  if (!std::filesystem::is_regular_file(file)) {
    throw UsageError(fmt::format("{}: no such recipe file (see `tune ls` for the shipped recipes)", file.string()));
  }
  const Recipe& recipe = find_recipe(config::peek_recipe_name(file, overrides));
  return {&recipe, config::load(file, overrides, recipe.schema())};
}

BudgetPlan make_plan(const std::filesystem::path& file, const std::vector<std::string>& overrides, uint64_t budget,
                     int processes) {
  auto [recipe, config] = load_recipe(file, overrides);
  if (!recipe->plan) {
    throw UsageError(fmt::format("recipe '{}' has no memory planner yet: tune plan and --memory-budget cover the sft, "
                                 "dpo, latte, latte_t2v and sana recipes", recipe->name));
  }
  return recipe->plan({std::move(config), budget, std::max(1, processes)});
}

// "512" (a square) or "WIDTHxHEIGHT", as (height, width).
std::pair<int64_t, int64_t> parse_size(const std::string& text) {
  const size_t x = text.find('x');
  const auto side = [&](const std::string& part) -> int64_t {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || value <= 0) {
      throw UsageError(fmt::format("--size '{}': expected a side in pixels (512) or WIDTHxHEIGHT (512x320)", text));
    }
    return value;
  };
  if (x == std::string::npos) {
    const int64_t value = side(text);
    return {value, value};
  }
  return {side(text.substr(x + 1)), side(text.substr(0, x))};
}

int run_inference_plan(const PlanArguments& arguments, uint64_t budget) {
  auto [recipe, config] = load_recipe(arguments.recipe, arguments.overrides);
  if (!recipe->plan_inference) {
    throw UsageError(fmt::format("recipe '{}' has no plan for tune infer --grad: tune plan --infer covers the "
                                 "latte and latte_t2v recipes", recipe->name));
  }
  InferencePlanRequest request{std::move(config), budget, arguments.frames, {}};
  for (const int64_t frames : arguments.frames) {
    if (frames <= 0) throw UsageError(fmt::format("--frames {}: expected a count above zero", frames));
  }
  for (const auto& size : arguments.sizes) request.sizes.push_back(parse_size(size));
  const InferencePlan plan = recipe->plan_inference(request);
  if (arguments.json) {
    std::cout << inference_plan_to_json(plan).dump(2) << "\n";
  } else {
    std::cout << inference_plan_table(plan);
  }
  if (plan.requested_fit()) return 0;
  std::cerr << "error: " << inference_nothing_fits_message(plan) << "\n";
  return 1;
}

std::pair<std::string, std::string> split_override(const std::string& item) {
  const size_t equals = item.find('=');
  if (equals == std::string::npos) return {item, ""};
  return {item.substr(0, equals), item.substr(equals + 1)};
}

}  // namespace

std::vector<std::string> merge_plan_overrides(const std::vector<std::string>& user,
                                              const std::vector<std::string>& planned, bool announce) {
  // The plan keeps the global batch the user asked for (batch_size x accumulation), so its split replaces the
  // user's micro-batch and accumulation; any other key the plan sets must agree with what the user set.
  static const std::vector<std::string> kSplitKeys = {"training.batch_size", "training.gradient_accumulation_steps"};
  std::vector<std::string> result;
  for (const auto& item : user) {
    const auto split = split_override(item);
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const std::string &key = split.first, &value = split.second;
    const auto plan_item = std::find_if(planned.begin(), planned.end(),
                                        [&](const std::string& p) { return split_override(p).first == key; });
    if (plan_item == planned.end()) {
      result.push_back(item);
      continue;
    }
    const std::string plan_value = split_override(*plan_item).second;
    if (plan_value == value) continue;  // the same setting: keep one
    if (std::find(kSplitKeys.begin(), kSplitKeys.end(), key) != kSplitKeys.end()) {
      if (announce) {
        log::info("--memory-budget: {}={} replaces your {} (the global batch is kept; the run's config.yaml records "
                  "the plan's values)", key, plan_value, item);
      }
      continue;
    }
    throw UsageError(fmt::format("--memory-budget: the plan that fits sets {}={}, but the command line sets {}; "
                                 "remove {} (the planner then chooses it) or drop --memory-budget",
                                 key, plan_value, item, item));
  }
  for (const auto& item : planned) result.push_back(item);
  return result;
}

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
  return merge_plan_overrides(overrides, chosen->setting.overrides(), announce);
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
  if (arguments.infer) return run_inference_plan(arguments, budget);
  if (!arguments.frames.empty() || !arguments.sizes.empty()) {
    throw UsageError("--frames and --size choose the samples of tune plan --infer: add --infer (training plans the "
                     "recipe's data.num_frames and data.image_size)");
  }
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
