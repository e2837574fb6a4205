// Shared helpers for the config tests: a fresh temporary directory to write YAML into, a test schema,
// and a way to capture the problems of a ConfigError.
#pragma once

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/scratch_dir.h"
#include "tune/config/config.h"

namespace tune::config::testing {

namespace fs = std::filesystem;
using TempDir = tune::testing::ScratchDir;
using tune::testing::ScopedEnv;

// A schema with every value type, a choice, a required key and keys without defaults.
inline Schema test_schema() {
  Schema schema;
  schema.choice("recipe", {"sft", "latte"}, "sft", "which recipe");
  schema.integer("seed", 0, "random seed");
  schema.boolean("gradient_checkpointing", true, "recompute activations");
  schema.choice("mixed_precision", {"bf16", "fp16", "no"}, "bf16", "autocast dtype");
  schema.string("optimizer.name", "adamw", "optimizer");
  schema.real("optimizer.lr", 3e-4, "learning rate");
  schema.real("optimizer.weight_decay", 0.0, "weight decay");
  schema.integer("model.layers", 2, "decoder layers");
  schema.integer("model.hidden", 64, "hidden size");
  schema.path("model.path", "model directory");
  schema.string_list("lora.targets", {"q_proj", "v_proj"}, "adapted projections");
  schema.add({"lora.layers", ValueType::integer_list, "[0, 1]", false, {}, "layers with adapters"});
  schema.required_path("data.train", "training JSONL");
  schema.optional_string("run_name", "a name for the run");
  schema.string("tag", "none", "free text");
  return schema;
}

// The problems of the ConfigError that `action` throws; fails the test when it throws nothing.
template <typename Action>
std::vector<std::string> problems_of(Action&& action) {
  try {
    action();
  } catch (const ConfigError& error) {
    return error.problems();
  }
  FAIL("expected a ConfigError");
  return {};
}

// The problems of loading `file` with the test schema.
inline std::vector<std::string> load_problems(const fs::path& file, const std::vector<std::string>& overrides = {}) {
  return problems_of([&] { load(file, overrides, test_schema()); });
}

}  // namespace tune::config::testing
