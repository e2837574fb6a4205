// The diffusion recipes' training planner (denoiser_plan.h).
#include "tune/recipes/diffusion/denoiser_plan.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/gradient_storage.h"

namespace tune::recipes::diffusion_common {

std::vector<PlanSetting> checkpointing_candidates(const RunSettings& run, int64_t blocks) {
  std::vector<PlanSetting> policies;
  for (const std::string name : {"off", "selective", "every_k", "sqrt", "full"}) {
    PlanSetting setting;
    setting.checkpointing = name;
    setting.k = name == "every_k" ? std::max<int64_t>(2, run.checkpointing.k) : 0;
    if (name == "every_k" && setting.k >= blocks) continue;
    policies.push_back(setting);
  }
  return policies;
}

memory::CheckpointRunner runner_for(const PlanSetting& setting, int64_t blocks) {
  memory::CheckpointOptions options;
  options.policy = setting.checkpointing == "off" ? memory::Policy::off : memory::parse_policy(setting.checkpointing);
  options.k = setting.k > 0 ? setting.k : 2;
  return memory::CheckpointRunner(options, blocks);
}

// The share of a step's work that recomputation adds: a step is about 3 forward passes (forward, and backward at
// twice its cost), and a checkpointed block runs its forward once more. selective recomputes only the attention
// cores and modulated norms, counted as a tenth of a block's forward (an assumption, not a measurement).
double relative_step_time(const memory::CheckpointRunner& runner, int64_t blocks) {
  if (runner.policy() == memory::Policy::off) return 1.0;
  if (runner.policy() == memory::Policy::selective) return 1.0 + 0.1 / 3.0;
  return 1.0 + static_cast<double>(runner.checkpointed_blocks()) / static_cast<double>(blocks) / 3.0;
}

const char* const kDenoiserTimeModel =
    "a rough model, not a measurement: a step is three block forwards and each recomputed block adds one (selective: "
    "a tenth of one); the plan's peaks are the training loop's own plan";

DenoiserParameterCounts count_denoiser_parameters(const torch::nn::Module& instance,
                                                  const std::vector<std::string>& block_prefixes,
                                                  int64_t instance_blocks, int64_t blocks_per_prefix, bool lora) {
  DenoiserParameterCounts outside;
  std::map<std::string, DenoiserParameterCounts> blocks;  // per prefix: the instance's blocks of that kind
  for (const auto& item : instance.named_parameters()) {
    const std::string& name = item.key();
    const auto prefix = std::find_if(block_prefixes.begin(), block_prefixes.end(), [&](const std::string& p) {
      return name.size() > p.size() + 1 && name.rfind(p + ".", 0) == 0 && std::isdigit(name[p.size() + 1]) != 0;
    });
    auto& counts = prefix == block_prefixes.end() ? outside : blocks[*prefix];
    const int64_t n = item.value().numel();
    counts.total += n;
    counts.trainable += !lora || name.find("lora_") != std::string::npos ? n : 0;
  }
  DenoiserParameterCounts result = outside;
  result.outside_blocks = outside.total;
  for (const auto& [prefix, kind] : blocks) {
    // The blocks of a kind are alike: each is the kind's total over the instance's count.
    result.total += blocks_per_prefix * kind.total / instance_blocks;
    result.trainable += blocks_per_prefix * kind.trainable / instance_blocks;
    result.largest_block = std::max(result.largest_block, kind.total / instance_blocks);
  }
  return result;
}

BudgetPlan plan_denoiser_training(const config::Config& config, const PlanRequest& request,
                                  const DenoiserPlanInputs& inputs) {
  const TrainingSettings training = read_training_settings(config);
  const DistributedSettings distributed = read_distributed_settings(config);
  const RunSettings run = read_run_settings(config);
  const DenoiserParameterCounts& counts = inputs.parameters;
  const int processes = std::max(1, request.processes);
  const bool full_shard = distributed.strategy == "full_shard" && processes > 1;
  const bool shard_state = (distributed.strategy == "shard_grad_op" || full_shard) && processes > 1;
  const auto share = [&](int64_t bytes, bool sharded) { return sharded ? (bytes + processes - 1) / processes : bytes; };
  const int64_t state_bytes_per_value = training.adamw.state_dtype == torch::kBFloat16 ? 2 : 4;
  // Trained weights in fp32; a LoRA run's frozen ones in bf16 with param_dtype bf16 (train_adapters_only).
  const int64_t frozen_bytes = run.frozen_weights_bf16 ? 2 : 4;
  const int64_t parameters = share(4 * counts.trainable + frozen_bytes * (counts.total - counts.trainable), full_shard);
  // fp32 gradients, or bf16 under training.compact_gradients (recipes/gradient_storage.h), where this counts every
  // one as held (the diffusion models' gradients all fit: Latte-S/2's 131 of 131), per checkpointing setting.
  const auto gradients_for = [&](const PlanSetting& setting) {
    const GradientStorageContext context{processes > 1, run.mixed_precision == precision::MixedPrecision::fp16};
    const bool compact =
        compact_gradients_active(training, run, setting.checkpointing != "off", setting.accumulation, context);
    return share((compact ? 2 : 4) * counts.trainable, full_shard);
  };
  // AdamW's two moments and the EMA copy of the trained weights (full_shard keeps the EMA as flat shards too; none
  // with ema.decay 0, whose average is the weights themselves).
  const int64_t ema_copy = config.get_real("ema.decay") == 0.0 ? 0 : 4 * counts.trainable;
  const int64_t optimizer_and_ema =
      share(2 * state_bytes_per_value * counts.trainable, shard_state) + share(ema_copy, full_shard);
  // full_shard gathers the rest of the model whole for the whole step and one block at a time, and each unit's
  // gradient exists whole until it is reduce-scattered (the rest's until the end of backward).
  const int64_t gathered = full_shard ? 2 * frozen_bytes * (counts.outside_blocks + counts.largest_block) : 0;

  const std::vector<PlanSetting> policies = checkpointing_candidates(run, inputs.blocks);
  BudgetPlan result;
  result.budget_bytes = request.budget_bytes;
  const int64_t rows_per_process = training.batch_size * training.gradient_accumulation_steps;
  for (int64_t batch = rows_per_process; batch >= 1; --batch) {
    if (rows_per_process % batch != 0) continue;
    for (PlanSetting setting : policies) {
      setting.batch_size = batch;
      setting.accumulation = rows_per_process / batch;
      setting.processes = processes;
      setting.shard_grad_op = distributed.strategy == "shard_grad_op";
      setting.full_shard = distributed.strategy == "full_shard";
      const memory::CheckpointRunner runner = runner_for(setting, inputs.blocks);
      PlanRow row;
      row.setting = setting;
      row.breakdown.parameters = parameters;
      row.breakdown.optimizer_state = optimizer_and_ema;
      const int64_t gradients = gradients_for(setting);
      row.breakdown.gradients = gradients;
      const StackPhases activations = inputs.activations(batch, runner);
      row.breakdown.activations = activations.peak();
      row.breakdown.other = gathered;
      // The step's peak is the end of forward or the worst block backward. Every gradient is counted in backward
      // (an upper bound: the later blocks' are not allocated yet then); at the end of forward none exists unless an
      // earlier micro-batch of the step left them (the loop frees them after each update: train::AdamW::zero_grad).
      const int64_t forward_end = activations.forward_end + (setting.accumulation > 1 ? gradients : 0);
      row.breakdown.step = std::max(forward_end, activations.backward + gradients) + gathered;
      row.peak_bytes = row.breakdown.peak();
      row.relative_time = relative_step_time(runner, inputs.blocks);
      result.rows.push_back(row);
    }
  }
  rank_and_choose(result, "fp32");
  result.processes = processes;
  result.global_batch = rows_per_process * processes;
  result.time_model = kDenoiserTimeModel;
  result.precision =
      run.mixed_precision == precision::MixedPrecision::no ? "fp32" : config.get_string("mixed_precision") + " autocast";
  result.device = torch::Device(run.device).is_cuda() ? "cuda" : "cpu";
  return result;
}

}  // namespace tune::recipes::diffusion_common
