// `tune infer` for the Latte recipe: sample videos with the EMA weights (DDIM or DDPM over a respaced process,
// optional classifier-free guidance) and, with --grad (default from grad_inference), gradient-guided sampling: at
// every step the gradient of an objective on the predicted clean video steers the sample. The objective is computed
// in the model's space (VAE latents or pixels): matching a reference frame, and temporal smoothness.
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/data/clip_sampling.h"
#include "tune/data/video_reader.h"
#include "tune/diffusion/guidance.h"
#include "tune/diffusion/sampler.h"
#include "tune/io/run_checkpoints.h"
#include "tune/io/safetensors.h"
#include "tune/memory/checkpoint.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/reference_frame.h"
#include "tune/recipes/diffusion/sample_files.h"
#include "tune/recipes/diffusion/sampling_progress.h"
#include "tune/recipes/diffusion/video_guidance.h"
#include "tune/recipes/latte/latte_checkpoint.h"
#include "tune/recipes/latte/latte_memory_report.h"
#include "tune/recipes/latte/latte_model.h"
#include "tune/recipes/latte/latte_recipe.h"
#include "tune/recipes/model_workloads.h"

namespace tune::recipes::latte {
namespace {

// The reference frame as the model sees it: [C, h, w] in model space.
torch::Tensor load_reference(const GuidanceSettings& guidance, const LatteSettings& settings, LatteParts& parts,
                             const torch::Device& device) {
  const auto pixels = diffusion_common::read_reference_pixels(*guidance.reference, settings.data.image_size,
                                                                settings.data.image_size);
  return to_model_space(parts, pixels.unsqueeze(0).to(device), 1)[0][0];
}

}  // namespace

int infer(const InferRequest& request) {
  // ---- checks
  if (!request.config) {  // a directory with latte_config.json: converted weights or a checkpoint
    const std::string dir = request.model_dir ? request.model_dir->string() : "a bare model directory";
    throw UsageError(fmt::format("{} holds Latte weights but no sampling settings (frames, VAE, sampler): sample "
                                 "from a recipe (recipe: latte) with model.path: {}, or from a run directory",
                                 dir, dir));
  }
  if (!request.prompts.empty()) throw UsageError("--prompt applies to LLM recipes; Latte samples a class (--class N)");
  if (request.raw) throw UsageError("--raw applies to LLM recipes (it skips the chat template); this is Latte");
  const RunSettings run = read_run_settings(*request.config);
  LatteSettings latte = read_latte_settings(*request.config);
  auto& sampling = latte.sampling;
  if (request.sampler) sampling.sampler = *request.sampler;
  if (request.steps) sampling.steps = *request.steps;
  if (request.cfg_scale) sampling.cfg_scale = *request.cfg_scale;
  if (request.num_samples) sampling.num_samples = *request.num_samples;
  if (request.max_new_tokens >= 0 || request.temperature >= 0 || request.top_p >= 0) {
    throw UsageError("--max-new-tokens, --temperature and --top-p apply to LLM recipes, not to Latte");
  }
  if (sampling.steps > latte.diffusion.num_timesteps) {
    throw UsageError(fmt::format("--steps {} exceeds diffusion.num_timesteps ({})", sampling.steps,
                                 latte.diffusion.num_timesteps));
  }

  // ---- weights: the newest checkpoint's EMA, else model.path
  configure_threads(run.threads);
  memory_tracker::install();
  const torch::Device device(run.device);
  std::optional<std::filesystem::path> checkpoint;
  checkpoint = inference_checkpoint(request);
  if (checkpoint) latte.model.path = checkpoint->string();
  if (!latte.model.path) {
    throw UsageError(fmt::format("no trained checkpoint in {} and no model.path: train first (tune train) or set "
                                 "model.path to converted Latte weights",
                                 request.run_dir ? request.run_dir->string() : "the run directory"));
  }
  LatteParts parts = build_latte(latte, 0, run.seed);
  load_sampling_weights(*latte.model.path, parts.model);
  auto& model = parts.model;
  model->to(device);
  model->eval();
  // Sampling trains nothing, and --grad differentiates the latents only: with trainable weights every matmul would
  // also keep its input for a weight gradient nobody asks for.
  for (auto& parameter : model->parameters()) parameter.set_requires_grad(false);
  const auto& config = model->config();
  const bool cfg = sampling.cfg_scale != 1.0;
  const int64_t rows = sampling.num_samples * (cfg ? 2 : 1);  // classifier-free guidance doubles the model's batch
  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  choose_cpu_kernels(latte_workload(config, rows, compute_dtype, /*training=*/request.grad), device);
  if (parts.vae) (*parts.vae)->to(device);
  auto checkpointing = std::make_shared<memory::CheckpointRunner>(run.checkpointing, model->num_blocks());
  model->set_block_runner(checkpointing);
  // The memory plan of a guided step: the weights and the activations of one forward + backward through the model
  // (latte_memory_report.h, frozen weights), for the CFG-doubled batch; checked against the tracked peak in the
  // tests, and what `tune plan --infer` counts.
  int64_t weight_bytes = 0;
  for (const auto& p : model->parameters()) weight_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  int64_t activation_estimate = 0;
  if (request.grad) {
    LatteActivationShape shape{rows, run.mixed_precision == precision::MixedPrecision::no ? 4 : 2};
    shape.frozen = true;
    activation_estimate = latte_activation_estimate(config, shape, device.type(), compute_dtype, *checkpointing);
    log::info("memory plan while denoising: weights {}, activations of a guided step ~{} (batch {}{}): ~{} in all",
              format_bytes(static_cast<double>(weight_bytes)), format_bytes(static_cast<double>(activation_estimate)),
              rows, cfg ? ", CFG-doubled" : "", format_bytes(static_cast<double>(weight_bytes + activation_estimate)));
  }

  torch::Tensor labels;
  int64_t label = -1;
  if (config.class_conditional()) {
    if (!request.class_label) {
      throw UsageError(fmt::format("this model is class-conditional: pass --class N with N in 0..{}", config.num_classes - 1));
    }
    label = *request.class_label;
    if (label < 0 || label >= config.num_classes) {
      throw UsageError(fmt::format("--class {} is out of range: the model has classes 0..{}", label, config.num_classes - 1));
    }
    labels = torch::full({sampling.num_samples}, label, torch::dtype(torch::kLong).device(device));
  } else if (request.class_label) {
    throw UsageError("--class applies to class-conditional models (model.extras: 2); this one is unconditional");
  }
  if (cfg && !config.class_conditional()) {
    throw UsageError("--cfg-scale needs a class-conditional model (model.extras: 2)");
  }
  if (cfg && config.class_dropout_prob <= 0) {
    throw UsageError("--cfg-scale needs a model trained with class dropout (it has no null class)");
  }

  // ---- the sampling process
  diffusion::DiffusionOptions diffusion_options;
  diffusion_options.noise_schedule = latte.diffusion.beta_schedule;
  diffusion_options.diffusion_steps = latte.diffusion.num_timesteps;
  // Latte's sample.py respaces with create_diffusion(str(N)) for DDPM and DDIM alike: N evenly strided timesteps
  // with fractional stride (0, 20, 41, ..., 999 at 50), possible for any N, not the DDIM paper's "ddimN".
  diffusion_options.timestep_respacing = std::to_string(sampling.steps);
  diffusion_options.process.var_type =
      config.learn_sigma ? diffusion::ModelVarType::LearnedRange : diffusion::ModelVarType::FixedLarge;
  const auto diffusion = diffusion::create_diffusion(diffusion_options);

  const diffusion::ConditionalModelFn conditional = [&](const torch::Tensor& x, const torch::Tensor& t,
                                                        const torch::Tensor& y) {
    precision::AutocastScope autocast(run.mixed_precision, device);
    return model->forward(x, t, y);
  };
  diffusion::ModelFn model_fn = [&](const torch::Tensor& x, const torch::Tensor& t) { return conditional(x, t, labels); };
  if (cfg) {
    model_fn = diffusion::classifier_free_guidance(conditional, labels, torch::full({1}, config.num_classes, labels.options()),
                                                   sampling.cfg_scale, /*channel_dim=*/2);
  }

  diffusion::SamplerOptions sampler_options;
  sampler_options.eta = sampling.eta;
  // In pixel space the clean video lies in [-1, 1]: clamp the x0 prediction there. VAE latents have no such range
  // (Latte samples them unclamped).
  sampler_options.clip_denoised = !parts.vae;
  std::string guidance_description = "off";
  if (request.grad) {
    const auto& guidance = latte.guidance;
    diffusion_common::VideoGuidanceObjective objective;
    if (guidance.reference) objective.reference = load_reference(guidance, latte, parts, device);
    objective.reference_frame = guidance.reference_frame;
    objective.reference_weight = guidance.reference_weight;
    objective.smoothness_weight = guidance.smoothness_weight;
    sampler_options.guidance = diffusion_common::make_video_guidance(objective);
    guidance_description = diffusion_common::describe(objective);
  }
  diffusion_common::SamplingProgress progress(sampling.steps);
  progress.attach(sampler_options);

  at::Generator generator = at::detail::createCPUGenerator(run.seed);
  const auto noise = torch::randn({sampling.num_samples, config.num_frames, config.in_channels, config.input_size,
                                   config.input_size}, generator, torch::kFloat32).to(device);
  memory_tracker::reset_peak(device.is_cuda());
  const auto sampling_start = std::chrono::steady_clock::now();
  const auto samples = sampling.sampler == "ddim"
                           ? diffusion::ddim_sample_loop(diffusion, model_fn, noise, generator, sampler_options)
                           : diffusion::p_sample_loop(diffusion, model_fn, noise, generator, sampler_options);
  progress.finish();
  const double sampling_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sampling_start).count();
  const int64_t peak = memory_tracker::peak_bytes(device.is_cuda());
  torch::NoGradGuard no_grad;
  const auto videos = to_pixel_space(parts, samples, latte.model.vae_chunk_frames).cpu();

  // ---- outputs
  const std::filesystem::path out = request.out ? *request.out
                                                : std::filesystem::path(request.config->get_string("output_dir")) /
                                                      "samples" / fmt::format("sample-class{}.mp4", label);
  std::vector<std::string> written;
  for (int64_t i = 0; i < sampling.num_samples; ++i) {
    const auto path = diffusion_common::numbered_path(out, i, sampling.num_samples);
    diffusion_common::write_video_sample(path, videos[i], sampling.fps, {{"label", torch::tensor({label})}});
    log::info("wrote {}", path.string());
    written.push_back(path.string());
  }
  log::info("sampled {} video(s){} with {} {} steps, cfg scale {}, weights {}", sampling.num_samples,
            label >= 0 ? fmt::format(" of class {}", label) : "", sampling.sampler, sampling.steps, sampling.cfg_scale,
            *latte.model.path);
  log::info("gradient guidance: {}; gradient checkpointing {}; mixed precision {}; peak memory {}", guidance_description,
            checkpointing->describe(), precision::to_string(run.mixed_precision), format_bytes(static_cast<double>(peak)));
  if (request.json) {  // for scripts (the benchmark): what ran and what it measured, one JSON object on stdout
    const nlohmann::json summary = {{"outputs", written},
                                    {"class", label},
                                    {"sampler", sampling.sampler},
                                    {"steps", sampling.steps},
                                    {"cfg_scale", sampling.cfg_scale},
                                    {"grad", request.grad},
                                    {"guidance", guidance_description},
                                    {"gradient_checkpointing", checkpointing->describe()},
                                    {"weights_bytes", weight_bytes},
                                    {"activations_estimate_bytes", activation_estimate},
                                    {"mixed_precision", precision::to_string(run.mixed_precision)},
                                    {"sampling_s", sampling_seconds},
                                    {"peak_mem_bytes", peak}};
    std::cout << summary.dump() << std::endl;
  }
  return 0;
}

}  // namespace tune::recipes::latte
