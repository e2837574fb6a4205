// `tune plan` (commands.h's run_plan) and what `tune train --memory-budget` applies: the recipe's plan for a
// budget, turned into overrides that select the fastest setting that fits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tune/recipes/commands.h"

namespace tune::recipes {

// "16GiB", "500MB", "2048" (bytes): KB/MB/GB decimal, KiB/MiB/GiB binary (io::parse_byte_size). Anything else,
// zero included, is a UsageError naming `flag`.
uint64_t parse_memory_budget(const std::string& text, const std::string& flag);

// The user's overrides followed by those of the plan's choice for `budget` (a --memory-budget value) with
// `processes` data-parallel processes, which therefore win and land in the run's resolved config.yaml. Logs the
// choice and why when `announce`. Throws Error (exit 1) saying by how much, and what would fit, when nothing does.
std::vector<std::string> overrides_for_memory_budget(const std::filesystem::path& recipe,
                                                     const std::vector<std::string>& overrides,
                                                     const std::string& budget, int processes, bool announce);

// tune train's overrides with --memory-budget applied (unchanged without it). The processes are --nproc's, or a
// launcher's world size in a worker; a --nproc launcher only checks that something fits (its workers, started with
// the same flag, choose alike), and rank 0 alone logs the choice.
std::vector<std::string> apply_memory_budget(const TrainArguments& arguments);

// The user's overrides with the plan's appended: the plan's micro-batch split replaces the user's
// training.batch_size / training.gradient_accumulation_steps (logged when `announce`); the same value set by both is
// kept once; any other key both set to different values is a UsageError naming it.
std::vector<std::string> merge_plan_overrides(const std::vector<std::string>& user,
                                              const std::vector<std::string>& planned, bool announce);

}  // namespace tune::recipes
