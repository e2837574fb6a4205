// The SFT recipe's memory budget planner (sft_plan.h).
#include "tune/recipes/sft/sft_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/sft/parameter_bytes.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/recipes/sft/sft_settings.h"

namespace tune::recipes::sft {
namespace {

// The recipe as the planner sees it: the prediction inputs and what the candidates keep from it.
struct RecipeShape {
  SftPlanInputs inputs;
  int64_t rows_per_process = 1;  // training.batch_size x training.gradient_accumulation_steps
  int64_t recipe_k = 2;
  std::string param_dtype = "fp32";
  bool has_model_path = false;
  bool mixed_precision_off = false;
};

models::LlamaConfig model_config(const SftSettings& sft) {
  if (sft.model.path) {
    return models::LlamaConfig::from_file((std::filesystem::path(*sft.model.path) / "config.json").string());
  }
  models::LlamaConfig config = sft.model.architecture;
  if (config.vocab_size == 0) config.vocab_size = load_tokenizer(sft).vocab_size();  // as build_model does
  return config;
}

RecipeShape read_recipe(const config::Config& config, const SftPlanInputs::Pairs& pairs) {
  const RunSettings run = read_run_settings(config);
  const TrainingSettings training = read_training_settings(config);
  const SftSettings sft = read_sft_settings(config);
  if (run.frozen_weights_bf16 && sft.model.lora.lora.rank == 0) {  // the check sft_train.cpp makes
    config.fail("param_dtype", "is 'bf16', which stores frozen weights in bf16, but full fine-tuning trains every "
                               "weight (kept in fp32); use it with lora.rank > 0");
  }
  const DistributedSettings distributed = read_distributed_settings(config);
  RecipeShape shape;
  shape.inputs.model = model_config(sft);
  shape.inputs.lora = sft.model.lora;
  if (sft.model.path) {
    // A directory bitsandbytes saved in 4-bit loads its projections as NF4 (build_model): counted so. With
    // lora.quantize_base nf4 as well, the recipe's double_quant stands for both (their statistics differ by ~0.37
    // bits per parameter when the directory's are not double-quantised).
    const PrequantizedBase prequantized = prequantized_base(*sft.model.path, shape.inputs.model);
    if (!prequantized.projections.empty() && sft.model.lora.lora.rank == 0) {
      config.fail("lora.rank", fmt::format("is 0 (full fine-tuning), but model.path ({}) holds bitsandbytes 4-bit "
                                           "weights, which cannot train; set lora.rank > 0 (QLoRA)",
                                           *sft.model.path));
    }
    if (sft.model.lora.nf4_modules.empty()) shape.inputs.lora.double_quant = prequantized.double_quant;
    for (const std::string& projection : prequantized.projections) {
      auto& modules = shape.inputs.lora.nf4_modules;
      if (std::find(modules.begin(), modules.end(), projection) == modules.end()) modules.push_back(projection);
    }
  }
  shape.inputs.sequence = sft.data.max_length;
  shape.inputs.low_precision = run.mixed_precision != precision::MixedPrecision::no;
  shape.inputs.fp16 = run.mixed_precision == precision::MixedPrecision::fp16;
  shape.inputs.cuda = run.device.rfind("cuda", 0) == 0;
  shape.inputs.bucket_bytes = distributed.bucket_bytes;
  shape.inputs.reduce_bf16 = distributed.reduce_bf16;
  shape.inputs.optimizer_state_bf16 = training.adamw.state_dtype == torch::kBFloat16;
  shape.inputs.shard_optimizer_state = distributed.strategy == "shard_grad_op";
  shape.inputs.full_shard = distributed.strategy == "full_shard";
  shape.inputs.pairs = pairs;
  shape.rows_per_process = training.batch_size * training.gradient_accumulation_steps;
  shape.recipe_k = run.checkpointing.k;
  shape.param_dtype = run.frozen_weights_bf16 ? "bf16" : "fp32";
  shape.has_model_path = sft.model.path.has_value();
  shape.mixed_precision_off = run.mixed_precision == precision::MixedPrecision::no;
  return shape;
}

std::string describe_model(const SftPlanInputs& inputs) {
  const ParameterCounts counts = count_parameters(inputs.model, inputs.lora);
  const std::string training =
      inputs.lora.lora.rank > 0
          ? fmt::format("{} rank {}, {} trainable{}", counts.nf4 > 0 ? "QLoRA" : "LoRA", inputs.lora.lora.rank,
                        format_count(static_cast<double>(counts.trainable)),
                        counts.nf4 > 0 ? fmt::format(", {} in NF4", format_count(static_cast<double>(counts.nf4))) : "")
          : std::string("full fine-tuning");
  std::string pairs;
  if (inputs.pairs.enabled) {
    const int64_t copy = inputs.pairs.reference_copy_bytes_per_parameter;
    pairs = fmt::format("; preference pairs, two rows each; reference: {}",
                        !inputs.pairs.reference_forward ? "none held (reference-free loss, or precomputed)"
                        : inputs.lora.lora.rank > 0     ? "the base with the adapters off"
                                                        : fmt::format("a frozen copy in {}", copy == 2 ? "bf16" : "fp32"));
  }
  return fmt::format("{} layers, hidden {}, vocabulary {}, {} parameters ({}){}", inputs.model.num_hidden_layers,
                     inputs.model.hidden_size, inputs.model.vocab_size, format_count(static_cast<double>(counts.total)),
                     training, pairs);
}

// The CPU kernels a run of `recipe` would take on this CPU (the attention core measured per sequence length, per
// row, so every micro-batch split shares it; usually read from the cache): the estimates count what they keep. The
// matrix products' choice is made too: which core the run's estimate counts follows it (measured on the AVX512-BF16
// EPYC: without it the plan counted the fp32-accumulate products' run, 1.5 MiB under a native-product run's 5.1 MiB
// of activations). Quiet: a plan probes many lengths.
void choose_attention_core(const RecipeShape& recipe) {
  if (recipe.inputs.cuda || !recipe.inputs.low_precision) return;
  CpuWorkload workload = llama_workload(recipe.inputs.model, 1, recipe.inputs.sequence,
                                        recipe.inputs.fp16 ? torch::kHalf : torch::kBFloat16, /*training=*/true);
  workload.announce = false;
  choose_cpu_kernels(workload, torch::kCPU);
}

BudgetPlan plan_recipe(const RecipeShape& recipe, int processes, uint64_t budget) {
  choose_attention_core(recipe);
  return plan_for(recipe.inputs, candidate_settings(recipe.inputs, recipe.rows_per_process, processes, recipe.recipe_k),
                  budget, recipe.param_dtype);
}

PlanAlternative alternative(const RecipeShape& changed, int processes, uint64_t budget, std::string description,
                            std::vector<std::string> overrides) {
  const BudgetPlan plan = plan_recipe(changed, processes, budget);
  PlanAlternative result;
  result.description = std::move(description);
  result.overrides = std::move(overrides);
  result.fits = plan.chosen.has_value();
  result.best = result.fits ? *plan.chosen_row() : plan.smallest_row();
  return result;
}

// The longest data.max_length below the recipe's at which some setting fits (the peak grows with the length),
// rounded down to a multiple of 64 (or 8) for tidy rows; nullopt when not even one token fits.
std::optional<int64_t> longest_fitting_length(RecipeShape recipe, int processes, uint64_t budget) {
  auto fits = [&](int64_t length) {
    recipe.inputs.sequence = length;
    return plan_recipe(recipe, processes, budget).chosen.has_value();
  };
  int64_t low = 1, high = recipe.inputs.sequence - 1;
  if (high < 1 || !fits(low)) return std::nullopt;
  while (low < high) {  // invariant: low fits
    const int64_t middle = low + (high - low + 1) / 2;
    if (fits(middle)) low = middle; else high = middle - 1;
  }
  if (low >= 64) return low / 64 * 64;
  if (low >= 8) return low / 8 * 8;
  return low;
}

// Computed alternatives for a budget nothing fits: each change alone, then (if none alone fits) all together.
std::vector<PlanAlternative> alternatives(const RecipeShape& recipe, int processes, uint64_t budget) {
  std::vector<PlanAlternative> found;
  std::vector<std::function<void(RecipeShape&, std::vector<std::string>&, std::string&)>> changes;
  if (recipe.inputs.lora.lora.rank == 0) {
    changes.push_back([](RecipeShape& shape, std::vector<std::string>& overrides, std::string& what) {
      shape.inputs.lora.lora.rank = 8;  // PEFT's usual rank, on the schema's default targets
      shape.inputs.lora.target_modules = {"q_proj", "v_proj"};
      overrides.push_back("lora.rank=8");
      what += (what.empty() ? "" : ", ") + std::string("LoRA rank 8 on q_proj, v_proj");
    });
  }
  // QLoRA: the frozen base's projections in NF4 (about 0.53 bytes per parameter instead of 2 or 4); from full
  // fine-tuning it comes with the LoRA change above, since NF4 weights cannot train.
  if (recipe.inputs.lora.nf4_modules.empty()) {
    const bool add_lora = recipe.inputs.lora.lora.rank == 0;
    changes.push_back([add_lora](RecipeShape& shape, std::vector<std::string>& overrides, std::string& what) {
      if (shape.inputs.lora.lora.rank == 0) {
        shape.inputs.lora.lora.rank = 8;
        shape.inputs.lora.target_modules = {"q_proj", "v_proj"};
      }
      if (add_lora && std::find(overrides.begin(), overrides.end(), "lora.rank=8") == overrides.end()) {
        overrides.push_back("lora.rank=8");
        what += (what.empty() ? "" : ", ") + std::string("LoRA rank 8 on q_proj, v_proj");
      }
      shape.inputs.lora.nf4_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
      shape.inputs.lora.double_quant = true;
      overrides.push_back("lora.quantize_base=nf4");
      what += (what.empty() ? "" : ", ") + std::string("QLoRA: the frozen projections in NF4");
    });
  }
  if (recipe.inputs.lora.lora.rank == 0 && !recipe.inputs.optimizer_state_bf16) {
    changes.push_back([](RecipeShape& shape, std::vector<std::string>& overrides, std::string& what) {
      shape.inputs.optimizer_state_bf16 = true;
      overrides.push_back("optimizer.state_dtype=bf16");
      what += (what.empty() ? "" : ", ") + std::string("AdamW moments in bf16 (approximate)");
    });
  }
  if (recipe.mixed_precision_off) {
    changes.push_back([](RecipeShape& shape, std::vector<std::string>& overrides, std::string& what) {
      shape.inputs.low_precision = true;
      shape.mixed_precision_off = false;
      overrides.push_back("mixed_precision=bf16");
      what += (what.empty() ? "" : ", ") + std::string("bf16 autocast");
    });
  }
  auto with_length = [&](RecipeShape shape, std::vector<std::string> overrides, std::string what) {
    if (const auto length = longest_fitting_length(shape, processes, budget)) {
      shape.inputs.sequence = *length;
      overrides.push_back(fmt::format("data.max_length={}", *length));
      what += fmt::format("{}data.max_length {} -> {}", what.empty() ? "" : ", ", recipe.inputs.sequence, *length);
      found.push_back(alternative(shape, processes, budget, what, overrides));
    }
  };
  with_length(recipe, {}, "");
  bool single_change_fits = !found.empty();
  for (const auto& change : changes) {
    RecipeShape shape = recipe;
    std::vector<std::string> overrides;
    std::string what;
    change(shape, overrides, what);
    found.push_back(alternative(shape, processes, budget, what, overrides));
    single_change_fits = single_change_fits || found.back().fits;
  }
  if (!single_change_fits && !changes.empty()) {
    RecipeShape shape = recipe;
    std::vector<std::string> overrides;
    std::string what;
    for (const auto& change : changes) change(shape, overrides, what);
    with_length(shape, overrides, what);
  }
  for (auto& entry : found) {
    if (entry.description.find("LoRA") != std::string::npos && !recipe.has_model_path) {
      entry.note = "LoRA adapts a pretrained model: it also needs model.path";
    }
  }
  return found;
}

}  // namespace

std::vector<PlanSetting> candidate_settings(const SftPlanInputs& inputs, int64_t rows_per_process, int processes,
                                            int64_t recipe_k) {
  const int64_t layers = inputs.model.num_hidden_layers;
  std::vector<PlanSetting> policies;
  auto add_policy = [&](const std::string& name, int64_t k) {
    PlanSetting setting;
    setting.checkpointing = name;
    setting.k = k;
    policies.push_back(setting);
  };
  add_policy("off", 0);
  add_policy("selective", 0);
  std::set<int64_t> ks;
  for (const int64_t k : {int64_t{2}, int64_t{4}, int64_t{8}, recipe_k}) {
    if (k >= 2 && k < layers) ks.insert(k);  // k = 1 is full; k >= layers checkpoints block 0 alone
  }
  for (const int64_t k : ks) add_policy("every_k", k);
  add_policy("sqrt", 0);
  add_policy("full", 0);

  std::vector<std::string> dtypes = {"fp32"};
  if (inputs.lora.lora.rank > 0 && inputs.low_precision) dtypes.push_back("bf16");

  std::vector<PlanSetting> candidates;
  for (int64_t batch = rows_per_process; batch >= 1; --batch) {
    if (rows_per_process % batch != 0) continue;
    for (const auto& dtype : dtypes) {
      for (PlanSetting setting : policies) {
        setting.batch_size = batch;
        setting.accumulation = rows_per_process / batch;
        setting.param_dtype = dtype;
        setting.processes = processes;
        setting.shard_grad_op = inputs.shard_optimizer_state;
        setting.full_shard = inputs.full_shard;
        candidates.push_back(setting);
      }
    }
  }
  return candidates;
}

BudgetPlan plan_for(const SftPlanInputs& inputs, const std::vector<PlanSetting>& candidates, uint64_t budget_bytes,
                    const std::string& preferred_param_dtype) {
  BudgetPlan plan;
  plan.budget_bytes = budget_bytes;
  for (const PlanSetting& setting : candidates) {
    PlanRow row;
    row.setting = setting;
    row.breakdown = predict_peak(inputs, setting);
    row.peak_bytes = row.breakdown.peak();
    row.relative_time = predict_relative_time(inputs, setting);
    plan.rows.push_back(row);
  }
  rank_and_choose(plan, preferred_param_dtype);
  return plan;
}

BudgetPlan plan(const PlanRequest& request) { return plan_llama(request, {}, "sft"); }

BudgetPlan plan_llama(const PlanRequest& request, const SftPlanInputs::Pairs& pairs, const std::string& recipe_name) {
  const RecipeShape recipe = read_recipe(request.config, pairs);
  configure_threads(read_run_settings(request.config).threads);  // the measured attention choice is per thread count
  BudgetPlan result = plan_recipe(recipe, request.processes, request.budget_bytes);
  result.recipe = recipe_name;
  if (pairs.enabled) result.batch_unit = "pairs";
  result.model = describe_model(recipe.inputs);
  result.precision = recipe.inputs.low_precision ? request.config.get_string("mixed_precision") + " autocast" : "fp32";
  result.device = recipe.inputs.cuda ? "cuda" : "cpu";
  result.processes = request.processes;
  result.global_batch = recipe.rows_per_process * request.processes;
  result.sequence = recipe.inputs.sequence;
  result.time_model = "a FLOP model, not a measurement: (forward + backward + recompute) / (forward + backward) of the "
                      "same step without checkpointing; matmul FLOPs counted exactly, elementwise work roughly, "
                      "memory traffic and communication not at all";
  if (pairs.enabled && pairs.reference_forward) result.time_model += "; the reference's forward counted in both";
  if (!result.chosen) result.alternatives = alternatives(recipe, request.processes, request.budget_bytes);
  return result;
}

}  // namespace tune::recipes::sft
