// `tune plan` for class-conditional Latte training (and `tune train --memory-budget`): the diffusion recipes'
// planner (diffusion/denoiser_plan.h) with Latte's parameter counts and latte_memory_report's activation estimate,
// as latte_train's own memory plan computes it.
#include <fmt/format.h>

#include <filesystem>

#include "tune/core/progress.h"
#include "tune/models/latte.h"
#include "tune/models/vae.h"
#include "tune/nn/attention_core.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/denoiser_plan.h"
#include "tune/recipes/diffusion/latent_manifest.h"
#include "tune/recipes/latte/latte_memory_report.h"
#include "tune/recipes/latte/latte_model.h"
#include "tune/recipes/latte/latte_recipe.h"

namespace tune::recipes::latte {
namespace {

// The classes training would find (model.num_classes 0 means "as many as the data has"): the prepared latents'
// manifest, else data.path's class folders; 1 when neither exists yet (the label table is a sliver of the model).
int64_t classes_in_data(const LatteSettings& settings) {
  if (settings.data.latents && std::filesystem::exists(*settings.data.latents)) {
    return static_cast<int64_t>(diffusion_common::read_latent_manifest(*settings.data.latents).classes.size());
  }
  int64_t folders = 0;
  if (settings.data.path && std::filesystem::is_directory(*settings.data.path)) {
    for (const auto& entry : std::filesystem::directory_iterator(*settings.data.path)) folders += entry.is_directory();
  }
  return std::max<int64_t>(folders, 1);
}

}  // namespace

BudgetPlan plan(const PlanRequest& request) {
  const config::Config& config = request.config;
  validate_latte_config(config);
  const RunSettings run = read_run_settings(config);
  const LatteSettings settings = read_latte_settings(config);
  std::optional<models::AutoencoderKLConfig> vae;
  if (settings.model.vae) vae = models::load_autoencoder_kl_config(*settings.model.vae);
  const models::LatteConfig model_config = make_latte_config(settings, classes_in_data(settings), vae);

  diffusion_common::DenoiserPlanInputs inputs;
  {  // counted on a one-pair model: Latte's spatial and temporal blocks are the same module
    models::LatteConfig pair = model_config;
    pair.depth = 2;
    const models::Latte instance(pair);
    inputs.parameters =
        diffusion_common::count_denoiser_parameters(*instance, {"blocks"}, 2, model_config.depth, false);
  }
  inputs.blocks = model_config.depth;
  const torch::Device device(run.device);
  const c10::ScalarType compute_dtype = precision::compute_dtype(run.mixed_precision);
  // The attention cores nn::run_attention_core takes, for plainly run blocks and for selective's (as latte_train).
  const LatteActivationShape shape{1, run.mixed_precision == precision::MixedPrecision::no ? 4 : 2,
                                   nn::uses_fused_attention(device.type(), compute_dtype)};
  LatteActivationShape selective_shape = shape;
  selective_shape.fused_attention = nn::uses_fused_attention(device.type(), compute_dtype, /*recomputing=*/true);
  inputs.activations = [&](int64_t batch, const memory::CheckpointRunner& runner) {
    LatteActivationShape plain = shape, selective = selective_shape;
    plain.batch = selective.batch = batch;
    return estimate_for_runner(latte_stack(model_config, plain, false), latte_stack(model_config, selective, true),
                               runner);
  };
  BudgetPlan result = diffusion_common::plan_denoiser_training(config, request, inputs);
  result.recipe = "latte";
  result.model = fmt::format("Latte {} blocks (spatial/temporal alternating), hidden {}, patch {}, {} parameters; "
                             "clips {} x {}x{}x{} ({}){}; optimizer state includes the EMA copy",
                             model_config.depth, model_config.hidden_size, model_config.patch_size,
                             format_count(static_cast<double>(inputs.parameters.total)), model_config.num_frames,
                             model_config.in_channels, model_config.input_size, model_config.input_size,
                             vae ? "VAE latents" : "pixels",
                             vae && !settings.data.latents
                                 ? "; the VAE encoding each batch (no data.latents) is not planned"
                                 : "");
  result.sequence = model_config.num_frames * model_config.num_patches();
  result.batch_unit = "clips";
  return result;
}

}  // namespace tune::recipes::latte
