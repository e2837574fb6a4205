// What a recipe is: a named family of runs (sft, latte) that declares its config schema and implements the
// commands. The CLI looks recipes up by the `recipe:` key of a config.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/recipes/plan/budget_plan.h"
#include "tune/recipes/plan/inference_plan.h"

namespace tune::recipes {

struct TrainRequest {
  config::Config config;
  std::filesystem::path output_dir;                   // resolved: --output-dir, else the config's output_dir
  std::optional<std::filesystem::path> resume_from;   // a complete checkpoint directory
};

struct InferRequest {
  std::optional<config::Config> config;   // a recipe file's or a run's config.yaml; unset for a bare model dir
  std::optional<std::filesystem::path> run_dir;       // when inferring from a run directory
  // RUN/checkpoints/step-N given as the target: that (complete) checkpoint rather than the run's newest.
  std::optional<std::filesystem::path> checkpoint;
  std::optional<std::filesystem::path> model_dir;     // when inferring from a bare HF model directory
  std::vector<std::string> prompts;      // one generation per prompt (--prompt, or each line of --prompts-file)
  bool grad = true;                       // --grad / --no-grad, default from grad_inference
  bool json = false;
  bool raw = false;                       // LLMs: the prompt as given (after BOS), no chat template
  int64_t max_new_tokens = -1;            // -1: from the config
  double temperature = -1.0;              // < 0: from the config
  double top_p = -1.0;
  // Video recipes (unset: the config's sampling.* keys); a recipe that has no use for one rejects it.
  std::optional<int64_t> class_label;
  std::optional<std::string> sampler;
  std::optional<int64_t> steps;
  std::optional<double> cfg_scale;
  std::optional<int64_t> num_samples;
  std::optional<std::filesystem::path> out;
  // Text-to-video recipes (unset: the config's sampling.* keys).
  std::optional<std::string> negative_prompt;
  std::optional<int64_t> frames, height, width;
  std::optional<std::filesystem::path> noise;  // initial latents, diffusers' layout [B, C, F, h, w]
};

struct ExportRequest {
  std::filesystem::path checkpoint;       // a complete checkpoint directory
  config::Config config;                  // the run's config.yaml
  bool merge_lora = false;
  // --base DIR (with --merge-lora): the original-precision model to merge into, e.g. the one a QLoRA run quantised
  // from; unset: the base the run loaded (for QLoRA its NF4 weights, dequantised).
  std::optional<std::filesystem::path> base;
  std::filesystem::path out;
  uint64_t max_shard_bytes = 5'000'000'000ULL;  // weights above this are sharded with an index, as transformers does
};

struct PrepareRequest {
  config::Config config;
  std::optional<std::filesystem::path> out;  // unset: the recipe's own default (Latte: data.latents)
  int64_t clips_per_video = 1;
};

struct Recipe {
  std::string name;
  std::string description;
  std::function<config::Schema()> schema;
  std::function<int(const TrainRequest&)> train;
  std::function<int(const InferRequest&)> infer;
  std::function<int(const InferRequest&)> chat;        // empty: the recipe has no conversation (video recipes)
  std::function<int(const ExportRequest&)> export_model;
  std::function<int(const PrepareRequest&)> prepare;  // empty: the recipe has nothing to precompute
  std::function<BudgetPlan(const PlanRequest&)> plan;  // empty: no memory planner (tune plan, --memory-budget)
  std::function<InferencePlan(const InferencePlanRequest&)> plan_inference;  // empty: no tune plan --infer
  // Every check `train` makes before it reads model files or data (ranges, combinations, distributed.shard_blocks
  // against the model's block types); throws ConfigError naming the key. `tune validate` and the --nproc launcher
  // (before any worker starts) run it; `train` runs it too.
  std::function<void(const config::Config&)> validate;
};

// The checkpoint `tune infer` reads from a run: request.checkpoint when the target named one, else the run
// directory's newest complete checkpoint; nullopt without either.
std::optional<std::filesystem::path> inference_checkpoint(const InferRequest& request);

// Every built-in recipe, registered explicitly (static registration is dropped by the linker in static libs).
const std::vector<Recipe>& all_recipes();
// Throws UsageError listing the known names.
const Recipe& find_recipe(const std::string& name);
// The same for a name read from a config: the error (a ConfigError) starts with the file:line:col of the
// `recipe:` value, so the user sees which file of an include chain (or which override) chose it.
const Recipe& find_recipe(const config::RecipeName& name);

}  // namespace tune::recipes
