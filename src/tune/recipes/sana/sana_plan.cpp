// `tune plan` for Sana training (and `tune train --memory-budget`): every checkpointing policy x micro-batch split
// for the recipe's transformer, resolution, caption length, precision and data-parallel strategy, with the peak
// per process that the training loop's own memory plan would print (parameters, gradients, AdamW state and EMA,
// divided as the strategy divides them, plus sana_memory_report's activation estimate of the micro-batch, which the
// CLI and unit tests hold to the measured peak).
#include <fmt/format.h>

#include <set>

#include "tune/core/progress.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/dc_ae.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/sana/sana_memory_report.h"
#include "tune/recipes/sana/sana_model.h"
#include "tune/recipes/sana/sana_recipe.h"

namespace tune::recipes::sana {
namespace {

struct ParameterCounts {
  int64_t total = 0;
  int64_t trainable = 0;  // every parameter (full fine-tuning) or the adapters (LoRA)
  int64_t largest_block = 0;
  int64_t outside_blocks = 0;  // the rest of the model (embeddings, caption projection, output layer)
};

// Counted on a one-block model and one block (a few hundred MB for Sana-1600M, freed on return), then scaled to
// num_layers: the model's own constructors decide the shapes, so the count is exact without its weights.
ParameterCounts count_parameters(const models::SanaConfig& config, const models::SanaLora& lora) {
  models::SanaConfig one = config;
  one.num_layers = 1;
  const models::Sana model(one, lora);
  ParameterCounts outside, block;
  for (const auto& item : model->named_parameters()) {
    const bool in_block = item.key().rfind("transformer_blocks.", 0) == 0;
    const bool trains = lora.options.rank == 0 || item.key().find("lora_") != std::string::npos;
    auto& counts = in_block ? block : outside;
    counts.total += item.value().numel();
    counts.trainable += trains ? item.value().numel() : 0;
  }
  return {outside.total + config.num_layers * block.total, outside.trainable + config.num_layers * block.trainable,
          block.total, outside.total};
}

// The share of a step's work that recomputation adds: a step is about 3 forward passes (forward, and backward at
// twice its cost), and a checkpointed block runs its forward once more. selective recomputes only the attention
// cores and modulated norms, counted as a tenth of a block's forward (an assumption, not a measurement).
double relative_time(const memory::CheckpointRunner& runner, int64_t blocks, bool off) {
  if (off) return 1.0;
  if (runner.policy() == memory::Policy::selective) return 1.0 + 0.1 / 3.0;
  return 1.0 + static_cast<double>(runner.checkpointed_blocks()) / static_cast<double>(blocks) / 3.0;
}

}  // namespace

BudgetPlan plan(const PlanRequest& request) {
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  const TrainingSettings training = read_training_settings(config);
  const DistributedSettings distributed = read_distributed_settings(config);
  const SanaSettings settings = read_sana_settings(config);
  validate_sana_config(config);
  const SanaComponents paths = resolve_sana_components(settings.model);
  const auto transformer = models::read_sana_config(paths.transformer / "config.json");
  const int64_t factor = models::load_autoencoder_dc_config(paths.vae).spatial_compression_ratio();
  if (settings.data.image_size % (factor * transformer.patch_size) != 0) {
    config.fail("data.image_size", fmt::format("({}) must be a multiple of {} (the VAE's factor {} x patch size {})",
                                               settings.data.image_size, factor * transformer.patch_size, factor,
                                               transformer.patch_size));
  }
  const ParameterCounts counts = count_parameters(transformer, settings.lora);
  const int processes = std::max(1, request.processes);
  const bool full_shard = distributed.strategy == "full_shard" && processes > 1;
  const bool shard_state = (distributed.strategy == "shard_grad_op" || full_shard) && processes > 1;
  const auto share = [&](int64_t bytes, bool sharded) { return sharded ? (bytes + processes - 1) / processes : bytes; };
  const int64_t state_bytes_per_value = training.adamw.state_dtype == torch::kBFloat16 ? 2 : 4;
  const int64_t parameters = share(4 * counts.total, full_shard);
  const int64_t gradients = share(4 * counts.trainable, full_shard);
  // AdamW's two moments and the EMA copy of the trained weights (full_shard keeps the EMA as flat shards too).
  const int64_t optimizer_and_ema =
      share(2 * state_bytes_per_value * counts.trainable, shard_state) + share(4 * counts.trainable, full_shard);
  // full_shard gathers the rest of the model whole for the whole step and one block at a time, and each unit's
  // gradient exists whole until it is reduce-scattered (the rest's until the end of backward).
  const int64_t gathered = full_shard ? 2 * 4 * (counts.outside_blocks + counts.largest_block) : 0;

  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  const torch::Device device(run.device);
  const int64_t rows_per_process = training.batch_size * training.gradient_accumulation_steps;
  std::vector<PlanSetting> policies;
  for (const std::string name : {"off", "selective", "every_k", "sqrt", "full"}) {
    PlanSetting setting;
    setting.checkpointing = name;
    setting.k = name == "every_k" ? std::max<int64_t>(2, run.checkpointing.k) : 0;
    if (name == "every_k" && setting.k >= transformer.num_layers) continue;
    policies.push_back(setting);
  }
  BudgetPlan result;
  result.budget_bytes = request.budget_bytes;
  for (int64_t batch = rows_per_process; batch >= 1; --batch) {
    if (rows_per_process % batch != 0) continue;
    SanaActivationShape shape;
    shape.batch = batch;
    shape.latent_height = shape.latent_width = settings.data.image_size / factor;
    shape.text_tokens = settings.sampling.max_text_tokens;
    shape.compute_bytes = run.mixed_precision == precision::MixedPrecision::no ? 4 : 2;
    shape.training_loss = true;
    for (PlanSetting setting : policies) {
      setting.batch_size = batch;
      setting.accumulation = rows_per_process / batch;
      setting.processes = processes;
      setting.shard_grad_op = distributed.strategy == "shard_grad_op";
      setting.full_shard = distributed.strategy == "full_shard";
      const bool off = setting.checkpointing == "off";
      memory::CheckpointOptions options;
      options.policy = off ? memory::Policy::off : memory::parse_policy(setting.checkpointing);
      options.k = setting.k > 0 ? setting.k : 2;
      const memory::CheckpointRunner runner(options, transformer.num_layers);
      PlanRow row;
      row.setting = setting;
      row.breakdown.parameters = parameters;
      row.breakdown.optimizer_state = optimizer_and_ema;
      row.breakdown.gradients = gradients;
      row.breakdown.activations = sana_activation_estimate(transformer, shape, device.type(), compute_dtype, runner);
      row.breakdown.other = gathered;
      // As the loop's own plan: every gradient counted at the backward peak (an upper bound: part of them is not
      // allocated yet when the activations peak).
      row.breakdown.step = row.breakdown.activations + gradients + gathered;
      row.peak_bytes = row.breakdown.peak();
      row.relative_time = relative_time(runner, transformer.num_layers, off);
      result.rows.push_back(row);
    }
  }
  rank_and_choose(result, "fp32");
  result.recipe = "sana";
  result.model = fmt::format("SanaTransformer2DModel {} blocks, hidden {}, {} parameters ({}); images {}x{} -> {}x{} "
                             "latents, {} caption tokens; optimizer state includes the EMA copy",
                             transformer.num_layers, transformer.inner_dim(), format_count(static_cast<double>(counts.total)),
                             settings.lora.options.rank > 0
                                 ? fmt::format("LoRA rank {}, {} trainable", settings.lora.options.rank,
                                               format_count(static_cast<double>(counts.trainable)))
                                 : std::string("full fine-tuning"),
                             settings.data.image_size, settings.data.image_size, settings.data.image_size / factor,
                             settings.data.image_size / factor, settings.sampling.max_text_tokens);
  result.precision = run.mixed_precision == precision::MixedPrecision::no
                         ? "fp32"
                         : config.get_string("mixed_precision") + " autocast";
  result.device = device.is_cuda() ? "cuda" : "cpu";
  result.processes = processes;
  result.global_batch = rows_per_process * processes;
  result.sequence = (settings.data.image_size / factor) * (settings.data.image_size / factor);
  result.time_model = "a rough model, not a measurement: a step is three block forwards and each recomputed block "
                      "adds one (selective: a tenth of one); the plan's peaks are the training loop's own plan";
  return result;
}

}  // namespace tune::recipes::sana
