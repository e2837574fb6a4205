// `tune plan` for class-conditional Latte training (and `tune train --memory-budget`): the diffusion recipes'
// planner (diffusion/denoiser_plan.h) with Latte's parameter counts and latte_memory_report's activation estimate,
// as latte_train's own memory plan computes it; with --infer, gradient-enabled sampling for every checkpointing
// policy x guidance (plan/inference_plan.h), as latte_infer's memory plan computes it.
#include <fmt/format.h>

#include <filesystem>

#include "tune/core/error.h"
#include "tune/core/progress.h"
#include "tune/models/latte.h"
#include "tune/models/vae.h"
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
  inputs.activations = [&](int64_t batch, const memory::CheckpointRunner& runner) {
    const LatteActivationShape shape{batch, run.mixed_precision == precision::MixedPrecision::no ? 4 : 2};
    return latte_activation_phases(model_config, shape, device.type(), compute_dtype, runner);
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

InferencePlan plan_inference(const InferencePlanRequest& request) {
  const config::Config& config = request.config;
  validate_latte_config(config);
  const RunSettings run = read_run_settings(config);
  const LatteSettings settings = read_latte_settings(config);
  const auto& sampling = settings.sampling;
  std::optional<models::AutoencoderKLConfig> vae;
  if (settings.model.vae) vae = models::load_autoencoder_kl_config(*settings.model.vae);
  const models::LatteConfig model_config = make_latte_config(settings, classes_in_data(settings), vae);
  // The model samples at the shape it was built for (its position tables have that many frames and patches).
  const int64_t pixels = settings.data.image_size;
  for (const int64_t f : request.frames) {
    if (f != model_config.num_frames) {
      throw UsageError(fmt::format("--frames {}: a class-conditional Latte samples {} frames, the number it was built "
                                   "for (data.num_frames)", f, model_config.num_frames));
    }
  }
  for (const auto& [height, width] : request.sizes) {
    if (height != pixels || width != pixels) {
      throw UsageError(fmt::format("--size {}x{}: a class-conditional Latte samples {}x{}, the size it was built for "
                                   "(data.image_size)", width, height, pixels, pixels));
    }
  }

  InferencePlan result;
  result.recipe = "latte";
  result.budget_bytes = request.budget_bytes;
  result.precision =
      run.mixed_precision == precision::MixedPrecision::no ? "fp32" : config.get_string("mixed_precision") + " autocast";
  const torch::Device device(run.device);
  result.device = device.is_cuda() ? "cuda" : "cpu";
  result.prompts = sampling.num_samples;
  result.batch_unit = "sample";
  result.shape_settable = false;
  result.time_model = "a rough model, not a measurement: a guided step is three block forwards and each recomputed "
                      "block adds one (selective: a tenth of one); the peaks are infer --grad's own memory plan";
  // Sampling holds the model's weights in fp32 and, in latent space, the VAE's (which decodes afterwards), each
  // counted on an instance built from its config.
  models::LatteConfig pair = model_config;
  pair.depth = 2;
  const auto counts = diffusion_common::count_denoiser_parameters(*models::Latte(pair), {"blocks"}, 2,
                                                                  model_config.depth, false);
  int64_t weights = counts.total * 4;
  int64_t vae_parameters = 0;
  if (vae) {
    for (const auto& p : models::AutoencoderKL(*vae)->parameters()) vae_parameters += p.numel();
  }
  weights += vae_parameters * 4;
  result.model = fmt::format("Latte {} blocks (spatial/temporal alternating), hidden {}, patch {}, {} parameters; "
                             "samples {} x {}x{}x{} ({}){}", model_config.depth, model_config.hidden_size,
                             model_config.patch_size, format_count(static_cast<double>(counts.total)),
                             model_config.num_frames, model_config.in_channels, model_config.input_size,
                             model_config.input_size, vae ? "VAE latents" : "pixels",
                             vae ? fmt::format("; the VAE's {} parameters held too",
                                               format_count(static_cast<double>(vae_parameters)))
                                 : "");

  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  const bool requested_cfg = sampling.cfg_scale != 1.0;
  // Guidance needs the null class of a model trained with label dropout.
  const bool can_guide = model_config.class_conditional() && model_config.class_dropout_prob > 0;
  const int64_t blocks = model_config.depth;
  for (const bool cfg : {false, true}) {
    if (cfg && !can_guide) continue;
    for (const PlanSetting& policy : diffusion_common::checkpointing_candidates(run, blocks)) {
      const auto runner = diffusion_common::runner_for(policy, blocks);
      LatteActivationShape shape{sampling.num_samples * (cfg ? 2 : 1),
                                 run.mixed_precision == precision::MixedPrecision::no ? 4 : 2};
      shape.frozen = true;
      InferencePlanRow row;
      row.checkpointing = policy.checkpointing;
      row.k = policy.k;
      row.frames = model_config.num_frames;
      row.height = row.width = pixels;
      row.cfg = cfg;
      row.weights_bytes = weights;
      row.activations_bytes = latte_activation_estimate(model_config, shape, device.type(), compute_dtype, runner);
      row.denoise_peak_bytes = row.peak_bytes = row.weights_bytes + row.activations_bytes;
      row.relative_time = diffusion_common::relative_step_time(runner, blocks);
      row.requested = cfg == requested_cfg;
      result.rows.push_back(row);
    }
  }
  rank_and_choose(result);
  return result;
}

}  // namespace tune::recipes::latte
