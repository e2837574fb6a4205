// `tune plan` for text-to-video Latte: training (the diffusion recipes' planner with this transformer's parameter
// counts and t2v_memory_report's estimate for the recipe's clips) and, with --infer, gradient-enabled sampling for
// every checkpointing policy x frames x resolution x guidance (plan/inference_plan.h), predicting what t2v_infer's
// own memory plan prints and its tracked peak while denoising.
#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/core/progress.h"
#include "tune/models/latte_t2v.h"
#include "tune/models/t5_encoder.h"
#include "tune/models/vae.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/denoiser_plan.h"
#include "tune/recipes/latte_t2v/t2v_memory_report.h"
#include "tune/recipes/latte_t2v/t2v_pipeline.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"

namespace tune::recipes::latte_t2v {
namespace {

struct PlannedModel {
  models::LatteT2VConfig transformer;
  int64_t vae_factor = 8;
  diffusion_common::DenoiserParameterCounts counts;
};

// The transformer's config, the VAE's factor, and the parameters counted on one spatial + temporal pair.
PlannedModel planned_model(const T2VSettings& settings, bool lora) {
  const ComponentPaths paths = resolve_components(settings.model);
  PlannedModel planned;
  planned.transformer = models::read_latte_t2v_config(paths.transformer / "config.json");
  planned.vae_factor = models::load_autoencoder_kl_config(paths.vae).downscale_factor();
  models::LatteT2VConfig one = planned.transformer;
  one.num_layers = 1;
  const models::LatteT2V instance(one, settings.lora);
  planned.counts = diffusion_common::count_denoiser_parameters(
      *instance, {"transformer_blocks", "temporal_transformer_blocks"}, 1, planned.transformer.num_layers, lora);
  return planned;
}

void check_multiple(const config::Config& config, const std::string& key, int64_t pixels, int64_t multiple) {
  if (pixels % multiple != 0) {
    config.fail(key, fmt::format("({}) must be a multiple of {} (the VAE's factor x the patch size)", pixels, multiple));
  }
}

std::string model_line(const PlannedModel& planned, const T2VSettings& settings) {
  const auto& t = planned.transformer;
  return fmt::format("LatteTransformer3DModel {} spatial + {} temporal blocks, hidden {}, {} parameters ({})",
                     t.num_layers, t.num_layers, t.inner_dim(), format_count(static_cast<double>(planned.counts.total)),
                     settings.lora.options.rank > 0
                         ? fmt::format("LoRA rank {}, {} trainable", settings.lora.options.rank,
                                       format_count(static_cast<double>(planned.counts.trainable)))
                         : std::string("full fine-tuning"));
}

}  // namespace

BudgetPlan plan(const PlanRequest& request) {
  const config::Config& config = request.config;
  validate_t2v_config(config);
  const RunSettings run = read_run_settings(config);
  const T2VSettings settings = read_t2v_settings(config);
  const PlannedModel planned = planned_model(settings, settings.lora.options.rank > 0);
  const auto& transformer = planned.transformer;
  check_multiple(config, "data.image_size", settings.data.image_size, planned.vae_factor * transformer.patch_size);
  const int64_t latent = settings.data.image_size / planned.vae_factor;
  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  const torch::Device device(run.device);

  diffusion_common::DenoiserPlanInputs inputs;
  inputs.parameters = planned.counts;
  inputs.blocks = 2 * transformer.num_layers;
  // As t2v_train's own estimate: the clips `tune prepare` writes for data.num_frames x data.image_size (plus
  // data.use_image_num joined images, counted as frames), with captions padded to sampling.max_text_tokens.
  const int64_t frames = settings.data.num_frames + settings.data.use_image_num;
  inputs.activations = [&](int64_t batch, const memory::CheckpointRunner& runner) {
    const T2VActivationShape shape{batch, frames, latent, latent, settings.sampling.max_text_tokens,
                                   run.mixed_precision == precision::MixedPrecision::no ? 4 : 2,
                                   /*training_loss=*/true};
    return t2v_activation_phases(transformer, shape, device.type(), compute_dtype, runner);
  };
  BudgetPlan result = diffusion_common::plan_denoiser_training(config, request, inputs);
  result.recipe = "latte_t2v";
  result.model = fmt::format("{}; clips {} x {}x{}{} -> {} x {}x{} latents, {} caption tokens; optimizer state "
                             "includes the EMA copy", model_line(planned, settings), settings.data.num_frames,
                             settings.data.image_size, settings.data.image_size,
                             settings.data.use_image_num == 0
                                 ? std::string()
                                 : fmt::format(" + {} joined images", settings.data.use_image_num),
                             frames, latent, latent, settings.sampling.max_text_tokens);
  result.sequence = frames * (latent / transformer.patch_size) * (latent / transformer.patch_size);
  result.batch_unit = "clips";
  return result;
}

InferencePlan plan_inference(const InferencePlanRequest& request) {
  const config::Config& config = request.config;
  validate_t2v_common_config(config);
  const RunSettings run = read_run_settings(config);
  const T2VSettings settings = read_t2v_settings(config);
  const auto& sampling = settings.sampling;
  const PlannedModel planned = planned_model(settings, settings.lora.options.rank > 0);
  const auto& transformer = planned.transformer;
  const int64_t multiple = planned.vae_factor * transformer.patch_size;
  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  const torch::Device device(run.device);

  InferencePlan result;
  result.recipe = "latte_t2v";
  result.budget_bytes = request.budget_bytes;
  result.precision =
      run.mixed_precision == precision::MixedPrecision::no ? "fp32" : config.get_string("mixed_precision") + " autocast";
  result.device = device.is_cuda() ? "cuda" : "cpu";
  result.time_model = "a rough model, not a measurement: a guided step is three block forwards and each recomputed "
                      "block adds one (selective: a tenth of one); the peaks are infer --grad's own memory plan";
  // The text phase: T5's weights in the dtype t2v_infer loads them in.
  const ComponentPaths paths = resolve_components(settings.model);
  const auto text_dtype = text_encoder_dtype(settings.model.text_encoder_dtype, run.mixed_precision);
  result.text_phase_bytes =
      models::t5_encoder_parameter_count(models::read_t5_encoder_config(paths.text_encoder / "config.json")) *
      static_cast<int64_t>(c10::elementSize(text_dtype));
  // Sampling holds every weight (LoRA adapters included) in fp32, or bf16 with param_dtype bf16 (as t2v_infer
  // holds them).
  const int64_t weights = planned.counts.total * (run.frozen_weights_bf16 ? 2 : 4);
  result.model = fmt::format("{}; text encoder T5 ({}) in {}, prompts of up to {} tokens",
                             model_line(planned, settings), format_bytes(static_cast<double>(result.text_phase_bytes)),
                             text_dtype == torch::kBFloat16 ? "bf16" : "fp32", sampling.max_text_tokens);

  std::vector<int64_t> frames = request.frames.empty() ? std::vector<int64_t>{sampling.frames} : request.frames;
  auto sizes = request.sizes.empty() ? std::vector<std::pair<int64_t, int64_t>>{{sampling.height, sampling.width}}
                                     : request.sizes;
  const bool requested_cfg = sampling.cfg_scale > 1.0;
  for (const auto& [height, width] : sizes) {
    if (request.sizes.empty()) {
      check_multiple(config, "sampling.height", height, multiple);
      check_multiple(config, "sampling.width", width, multiple);
    } else if (height % multiple != 0 || width % multiple != 0) {
      throw UsageError(fmt::format("--size {}x{}: both sides must be multiples of {} (the VAE's factor {} x the patch "
                                   "size {})", width, height, multiple, planned.vae_factor, transformer.patch_size));
    }
  }
  const int64_t blocks = 2 * transformer.num_layers;
  for (const int64_t f : frames) {
    for (const auto& [height, width] : sizes) {
      for (const bool cfg : {false, true}) {
        for (const PlanSetting& policy : diffusion_common::checkpointing_candidates(run, blocks)) {
          const auto runner = diffusion_common::runner_for(policy, blocks);
          // The guided step's activations as t2v_infer estimates them: the CFG-doubled batch, the prompt's tokens
          // (at most sampling.max_text_tokens: an upper bound for shorter prompts, which mask_feature cuts).
          const T2VActivationShape shape{cfg ? 2 : 1, f, height / planned.vae_factor, width / planned.vae_factor,
                                         sampling.max_text_tokens,
                                         run.mixed_precision == precision::MixedPrecision::no ? 4 : 2,
                                         /*training_loss=*/false};
          InferencePlanRow row;
          row.checkpointing = policy.checkpointing;
          row.k = policy.k;
          row.frames = f;
          row.height = height;
          row.width = width;
          row.cfg = cfg;
          row.weights_bytes = weights;
          row.activations_bytes = t2v_activation_estimate(transformer, shape, device.type(), compute_dtype, runner);
          row.denoise_peak_bytes = row.weights_bytes + row.activations_bytes;
          row.peak_bytes = std::max(row.denoise_peak_bytes, result.text_phase_bytes);
          row.relative_time = diffusion_common::relative_step_time(runner, blocks);
          row.requested = cfg == requested_cfg;
          result.rows.push_back(row);
        }
      }
    }
  }
  rank_and_choose(result);
  return result;
}

}  // namespace tune::recipes::latte_t2v
