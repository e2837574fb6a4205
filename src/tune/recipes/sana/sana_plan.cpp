// `tune plan` for Sana training (and `tune train --memory-budget`): the diffusion recipes' planner
// (diffusion/denoiser_plan.h) with Sana's parameter counts and sana_memory_report's activation estimate for the
// recipe's transformer, resolution, caption length and precision.
#include <fmt/format.h>

#include "tune/core/progress.h"
#include "tune/models/dc_ae.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/denoiser_plan.h"
#include "tune/recipes/sana/sana_memory_report.h"
#include "tune/recipes/sana/sana_model.h"
#include "tune/recipes/sana/sana_recipe.h"
#include "tune/recipes/sana/sana_training_sizes.h"

namespace tune::recipes::sana {

BudgetPlan plan(const PlanRequest& request) {
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  const SanaSettings settings = read_sana_settings(config);
  validate_sana_config(config);
  const SanaComponents paths = resolve_sana_components(settings.model);
  const auto transformer = models::read_sana_config(paths.transformer / "config.json");
  const int64_t factor = models::load_autoencoder_dc_config(paths.vae).spatial_compression_ratio();
  // With aspect-ratio buckets, the table's bucket with the most pixels (the plan reads no data): the step that peaks.
  const auto largest =
      largest_training_size(sana_training_sizes(settings.data, factor, transformer.patch_size, config));
  diffusion_common::DenoiserPlanInputs inputs;
  {  // counted on a one-block model (a few hundred MB for Sana-1600M, freed here)
    models::SanaConfig one = transformer;
    one.num_layers = 1;
    const models::Sana instance(one, settings.lora);
    inputs.parameters = diffusion_common::count_denoiser_parameters(*instance, {"transformer_blocks"}, 1,
                                                                    transformer.num_layers,
                                                                    settings.lora.options.rank > 0);
  }
  inputs.blocks = transformer.num_layers;
  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  const torch::Device device(run.device);
  SanaActivationShape shape;
  shape.latent_height = largest.height / factor;
  shape.latent_width = largest.width / factor;
  shape.text_tokens = settings.sampling.max_text_tokens;
  shape.compute_bytes = run.mixed_precision == precision::MixedPrecision::no ? 4 : 2;
  shape.training_loss = true;
  inputs.activations = [&](int64_t batch, const memory::CheckpointRunner& runner) {
    SanaActivationShape rows = shape;
    rows.batch = batch;
    return sana_activation_phases(transformer, rows, device.type(), compute_dtype, runner);
  };
  BudgetPlan result = diffusion_common::plan_denoiser_training(config, request, inputs);
  const auto& counts = inputs.parameters;
  result.recipe = "sana";
  result.model = fmt::format("SanaTransformer2DModel {} blocks, hidden {}, {} parameters ({}); images {}x{}{} -> "
                             "{}x{} latents, {} caption tokens; optimizer state includes the EMA copy",
                             transformer.num_layers, transformer.inner_dim(), format_count(static_cast<double>(counts.total)),
                             settings.lora.options.rank > 0
                                 ? fmt::format("LoRA rank {}, {} trainable", settings.lora.options.rank,
                                               format_count(static_cast<double>(counts.trainable)))
                                 : std::string("full fine-tuning"),
                             largest.width, largest.height,
                             settings.data.aspect_ratio_buckets ? " (the table's largest aspect-ratio bucket)" : "",
                             shape.latent_width, shape.latent_height, settings.sampling.max_text_tokens);
  result.sequence = shape.latent_height * shape.latent_width;
  return result;
}

}  // namespace tune::recipes::sana
