// `tune infer` for text-to-video Latte (Latte-1 as diffusers publishes it): prompts -> T5 embeddings (the encoder
// freed before denoising) -> DDIM over the transformer with classifier-free guidance on the noise channels -> the
// VAE's frames. With --grad the sampling keeps autograd on (gradient-guided sampling through checkpointed blocks):
// every spatial and temporal block goes through tune's checkpointing whenever gradients are on, training or not,
// which is what Latte-1's own code does not do (Vchitect/Latte#99).
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/data/tokenizer.h"
#include "tune/diffusion/scheduler_config.h"
#include "tune/diffusion/scheduler_sampler.h"
#include "tune/io/run_checkpoints.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/latte_t2v.h"
#include "tune/models/latte_t2v_config.h"
#include "tune/models/t5_encoder.h"
#include "tune/models/vae.h"
#include "tune/nn/attention_core.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/cpu_kernel_choice.h"
#include "tune/recipes/diffusion/diffusion_checkpoint.h"
#include "tune/recipes/diffusion/reference_frame.h"
#include "tune/recipes/diffusion/sample_files.h"
#include "tune/recipes/diffusion/sampling_progress.h"
#include "tune/recipes/diffusion/video_guidance.h"
#include "tune/recipes/latte_t2v/t2v_memory_report.h"
#include "tune/recipes/latte_t2v/t2v_model.h"
#include "tune/recipes/latte_t2v/t2v_pipeline.h"
#include "tune/recipes/latte_t2v/t2v_prompt.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"
#include "tune/recipes/model_workloads.h"

namespace tune::recipes::latte_t2v {
namespace {

void apply_request(const InferRequest& request, SamplingSettings& sampling) {
  if (request.class_label) throw UsageError("--class applies to class-conditional Latte; this is a text-to-video model (--prompt)");
  if (request.raw) throw UsageError("--raw applies to LLM recipes (it skips the chat template); this is text-to-video Latte");
  if (request.max_new_tokens >= 0 || request.temperature >= 0 || request.top_p >= 0) {
    throw UsageError("--max-new-tokens, --temperature and --top-p apply to LLM recipes, not to text-to-video Latte");
  }
  if (request.num_samples) throw UsageError("--num-samples: give one --prompt per video (--prompts-file for several)");
  if (request.steps) sampling.steps = *request.steps;
  if (request.cfg_scale) sampling.cfg_scale = *request.cfg_scale;
  if (request.negative_prompt) sampling.negative_prompt = *request.negative_prompt;
  if (request.frames) sampling.frames = *request.frames;
  if (request.height) sampling.height = *request.height;
  if (request.width) sampling.width = *request.width;
}


// The initial latents in diffusers' layout [B, C, F, h, w] (what --noise files hold and what torch.randn with a
// torch.Generator seeded alike draws), returned in tune's [B, F, C, h, w].
torch::Tensor initial_latents(const std::optional<std::filesystem::path>& noise_file, at::IntArrayRef diffusers_shape,
                              at::Generator& generator) {
  torch::Tensor noise;
  if (noise_file) {
    const auto file = io::SafetensorsFile::open(*noise_file);
    if (file.entries().size() != 1) {
      throw InputError(fmt::format("{}: --noise expects a file with one tensor (the initial latents), found {}",
                                   noise_file->string(), file.entries().size()));
    }
    const std::string name = file.entries().begin()->first;
    noise = file.load(name).to(torch::kFloat32);
    if (noise.sizes() != diffusers_shape) {
      throw InputError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}] ([batch, channels, frames, height/8, "
                                   "width/8], diffusers' layout) for these prompts, --frames, --height and --width",
                                   noise_file->string(), name, fmt::join(noise.sizes(), ", "),
                                   fmt::join(diffusers_shape, ", ")));
    }
  } else {
    noise = torch::randn(diffusers_shape, generator, torch::kFloat32);
  }
  return noise.permute({0, 2, 1, 3, 4}).contiguous();
}

const char* scheduler_name(diffusion::SchedulerKind kind) {
  return kind == diffusion::SchedulerKind::ddim ? "DDIM" : "DPM-Solver++";
}

// "56/56 blocks (28 spatial, 28 temporal)" and the like.
std::string describe_checkpointing(const memory::CheckpointRunner& runner, const models::LatteT2VImpl& model,
                                   bool temporal) {
  if (runner.policy() == memory::Policy::off || runner.policy() == memory::Policy::selective) return runner.describe();
  int64_t spatial = 0, temporal_blocks = 0;
  for (int64_t i = 0; i < model.num_blocks(); ++i) {
    if (!runner.is_checkpointed(i)) continue;
    (i % 2 == 0 ? spatial : temporal_blocks) += 1;
  }
  return fmt::format("{} ({} spatial, {} temporal{})", runner.describe(), spatial, temporal_blocks,
                     temporal ? "" : "; temporal blocks not run");
}

}  // namespace

int infer(const InferRequest& request) {
  if (!request.config) throw UsageError("text-to-video Latte samples from a pipeline directory or a recipe");
  if (request.prompts.empty()) throw UsageError("text-to-video Latte needs --prompt TEXT (or --prompts-file)");
  const RunSettings run = read_run_settings(*request.config);
  T2VSettings settings = read_t2v_settings(*request.config);
  auto& sampling = settings.sampling;
  apply_request(request, sampling);
  const ComponentPaths paths = resolve_components(settings.model);
  const auto scheduler = diffusion::read_scheduler_config(paths.scheduler / "scheduler_config.json");
  // Latte predicts noise on a DDPM process; a flow-matching config (Sana's) would turn its output into nonsense
  if (scheduler.flow()) {
    throw UsageError(fmt::format("{} is a flow-matching scheduler ({}{}), but Latte predicts noise on a DDPM "
                                 "process: use the pipeline's DDIMScheduler or DPMSolverMultistepScheduler config",
                                 (paths.scheduler / "scheduler_config.json").string(), scheduler.class_name,
                                 scheduler.use_flow_sigmas ? " with use_flow_sigmas" : ""));
  }
  if (request.grad && scheduler.kind != diffusion::SchedulerKind::ddim) {
    throw UsageError(fmt::format("gradient-guided sampling (--grad, the default from grad_inference) steps with DDIM; "
                                 "{} names {}: pass --no-grad, or model.scheduler=DIR with a DDIMScheduler config",
                                 (paths.scheduler / "scheduler_config.json").string(), scheduler.class_name));
  }
  // A run directory samples with its newest checkpoint's (or the one named) transformer (the EMA weights) in place of the pipeline's.
  std::optional<std::filesystem::path> checkpoint;
  if (request.run_dir) {
    checkpoint = inference_checkpoint(request);
    if (!checkpoint) {
      throw UsageError(fmt::format("no trained checkpoint in {}: train first (tune train), or sample from the "
                                   "pipeline directory itself", request.run_dir->string()));
    }
  }
  const auto transformer_config_file = checkpoint ? *checkpoint / "config.json" : paths.transformer / "config.json";
  const auto config = models::read_latte_t2v_config(transformer_config_file);
  const auto vae_config = models::load_autoencoder_kl_config(paths.vae);
  const int64_t factor = vae_config.downscale_factor();
  if (vae_config.latent_channels != config.in_channels) {
    throw InputError(fmt::format("{}: the VAE has {} latent channels, the transformer ({}) takes {}", paths.vae.string(),
                                 vae_config.latent_channels, paths.transformer.string(), config.in_channels));
  }
  for (const auto& [name, pixels] : {std::pair{"--height", sampling.height}, std::pair{"--width", sampling.width}}) {
    if (pixels % (factor * config.patch_size) != 0) {
      throw UsageError(fmt::format("{} {} must be a multiple of {} (VAE factor {} x patch size {})", name, pixels,
                                   factor * config.patch_size, factor, config.patch_size));
    }
  }

  configure_threads(run.threads);
  memory_tracker::install();
  const torch::Device device(run.device);
  const bool cuda = device.is_cuda();
  const bool cfg = sampling.cfg_scale > 1.0;  // LattePipeline: guidance_scale > 1
  const auto batch = static_cast<int64_t>(request.prompts.size());

  // ---- text: T5 runs once, under no-grad, and is gone before the transformer is loaded
  memory_tracker::reset_peak(cuda);
  PromptEmbeddings text;
  int64_t text_encoder_bytes = 0;
  {
    const auto tokenizer = data::Tokenizer::load(paths.tokenizer);
    auto encoder = models::load_t5_encoder(paths.text_encoder, text_encoder_dtype(settings.model.text_encoder_dtype,
                                                                                  run.mixed_precision), device);
    for (const auto& p : encoder->parameters()) text_encoder_bytes += p.numel() * p.element_size();
    text = encode_prompts(*encoder, tokenizer, request.prompts, sampling.negative_prompt, cfg,
                          sampling.max_text_tokens, sampling.mask_feature);
  }
  const int64_t text_peak = memory_tracker::peak_bytes(cuda);
  log::info("text encoder: {} of weights, peak {} while encoding {} prompt(s) ({} tokens); freed before denoising",
            format_bytes(static_cast<double>(text_encoder_bytes)), format_bytes(static_cast<double>(text_peak)), batch,
            fmt::join(text.token_counts, ", "));

  // ---- guidance.reference (--grad): its frame in latent space, the VAE's posterior mean; the VAE is freed again
  // before the transformer loads (it decodes at the end)
  torch::Tensor reference_latents;
  if (request.grad && settings.guidance.reference) {
    if (settings.guidance.reference_frame >= sampling.frames) {
      throw UsageError(fmt::format("guidance.reference_frame ({}) is not a frame of the {} sampled",
                                   settings.guidance.reference_frame, sampling.frames));
    }
    torch::NoGradGuard no_grad;
    auto vae = models::load_autoencoder_kl(paths.vae);
    vae->to(device);
    vae->eval();
    const auto pixels = diffusion_common::read_reference_pixels(*settings.guidance.reference, sampling.height,
                                                                sampling.width);
    reference_latents = vae->encode_frames(pixels.unsqueeze(0).to(device), 1, models::LatentSampling::kMean)[0][0];
  }

  // ---- the transformer, its blocks behind tune's checkpointing
  models::LatteT2V model = load_transformer(transformer_config_file, paths.transformer, settings.lora, checkpoint);
  if (checkpoint) {
    log::info("transformer: {} ({})", checkpoint->string(),
              request.checkpoint ? "the checkpoint named" : "the run's newest checkpoint");
  }
  if (run.frozen_weights_bf16) model->to(torch::kBFloat16);
  model->to(device);
  model->eval();
  for (auto& p : model->parameters()) p.set_requires_grad(false);  // sampling trains nothing; --grad differentiates x
  auto checkpointing = std::make_shared<memory::CheckpointRunner>(run.checkpointing, model->num_blocks());
  model->set_block_runner(checkpointing);
  const int64_t latent_h = sampling.height / factor, latent_w = sampling.width / factor;
  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  choose_cpu_kernels(latte_t2v_workload(config, cfg ? 2 * batch : batch, sampling.frames, latent_h, latent_w,
                                        text.text.size(1), compute_dtype, /*training=*/request.grad),
                     device);
  const std::string checkpoint_description = describe_checkpointing(*checkpointing, *model, sampling.temporal_attention);
  log::info("gradient checkpointing: {} (active whenever gradients are on, in training and in infer --grad)",
            checkpoint_description);
  // The memory plan of a guided step: the transformer's weights and the activations of one forward + backward
  // through it (t2v_memory_report.h), for the CFG-doubled batch; checked against the tracked peak in the tests.
  int64_t weight_bytes = 0;
  for (const auto& p : model->parameters()) weight_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  int64_t activation_estimate = 0;
  if (request.grad && sampling.temporal_attention) {
    const T2VActivationShape shape{cfg ? 2 * batch : batch, sampling.frames, latent_h, latent_w, text.text.size(1),
                                   run.mixed_precision == precision::MixedPrecision::no ? 4 : 2,
                                   /*training_loss=*/false};
    activation_estimate = t2v_activation_estimate(config, shape, device.type(), compute_dtype, *checkpointing);
    log::info("memory plan while denoising: transformer weights {}, activations of a guided step ~{} (batch {}{}): "
              "~{} in all; the text encoder is gone", format_bytes(static_cast<double>(weight_bytes)),
              format_bytes(static_cast<double>(activation_estimate)), shape.batch, cfg ? ", CFG-doubled" : "",
              format_bytes(static_cast<double>(weight_bytes + activation_estimate)));
  }

  // ---- denoising: classifier-free guidance on the noise channels, the learned-sigma channels dropped (as
  // Vchitect/Latte's pipeline always does for out_channels = 2 x in_channels)
  const auto text_cond = text.text.to(device);
  const torch::Tensor text_both = cfg ? torch::cat({text.negative.to(device), text_cond}) : text_cond;
  torch::Tensor mask_cond, mask_both;  // undefined (no mask, as LattePipeline) unless sampling.caption_mask
  if (sampling.caption_mask) {
    mask_cond = text.text_mask.to(device);
    mask_both = cfg ? torch::cat({text.negative_mask.to(device), mask_cond}) : mask_cond;
  }
  const int64_t eps_channels = config.in_channels;
  const double scale = sampling.cfg_scale;
  const bool temporal = sampling.temporal_attention;
  diffusion::ModelFn eps_model = [&](const torch::Tensor& x, const torch::Tensor& t) {
    precision::AutocastScope autocast(run.mixed_precision, device);
    if (!cfg) return model->forward(x, t, text_cond, mask_cond, temporal).narrow(2, 0, eps_channels);
    const auto both = model->forward(torch::cat({x, x}), torch::cat({t, t}), text_both, mask_both, temporal);
    const auto parts = both.chunk(2);
    return (parts[0] + scale * (parts[1] - parts[0])).narrow(2, 0, eps_channels);
  };

  diffusion::SamplerOptions sampler_options;
  sampler_options.eta = sampling.eta;
  std::string guidance_description = "off";
  if (request.grad) {
    diffusion_common::VideoGuidanceObjective objective;
    if (settings.guidance.reference) {
      objective.reference = reference_latents;
      objective.reference_frame = settings.guidance.reference_frame;
      objective.reference_weight = settings.guidance.reference_weight;
    }
    objective.smoothness_weight = settings.guidance.smoothness_weight;
    sampler_options.guidance = diffusion_common::make_video_guidance(objective);
    guidance_description = diffusion_common::describe(objective);
  }
  diffusion_common::SamplingProgress progress(sampling.steps);
  progress.attach(sampler_options);

  at::Generator generator = at::detail::createCPUGenerator(run.seed);
  const auto latents_T =
      initial_latents(request.noise, {batch, config.in_channels, sampling.frames, latent_h, latent_w}, generator)
          .to(device);
  memory_tracker::reset_peak(cuda);
  const auto sampling_start = std::chrono::steady_clock::now();
  const auto latents = diffusion::sample_with_scheduler(scheduler, sampling.steps, eps_model, latents_T, generator,
                                                        sampler_options);
  progress.finish();
  const double sampling_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sampling_start).count();
  const int64_t sampling_peak = memory_tracker::peak_bytes(cuda);
  model = nullptr;  // the transformer's weights go before the VAE decodes

  // ---- frames
  torch::NoGradGuard no_grad;
  auto vae = models::load_autoencoder_kl(paths.vae);
  vae->to(device);
  vae->eval();
  const auto videos = vae->decode_frames(latents, settings.model.vae_chunk_frames).clamp(-1.0, 1.0).cpu();
  const std::filesystem::path out =
      request.out ? *request.out
                  : std::filesystem::path(request.config->get_string("output_dir")) / "samples" / "sample.mp4";
  std::vector<std::string> written;
  for (int64_t i = 0; i < batch; ++i) {
    const auto path = diffusion_common::numbered_path(out, i, batch);
    // .safetensors also keeps the final latents in diffusers' layout [1, C, F, h, w], to compare with other tools.
    diffusion_common::write_video_sample(path, videos[i], sampling.fps,
                                         {{"latents", latents[i].permute({1, 0, 2, 3}).unsqueeze(0).cpu()}});
    log::info("wrote {}", path.string());
    written.push_back(path.string());
  }
  log::info("sampled {} video(s) of {} frames at {}x{} with {} {} steps, cfg scale {}", batch, sampling.frames,
            sampling.width, sampling.height, scheduler_name(scheduler.kind), sampling.steps, sampling.cfg_scale);
  log::info("gradient guidance: {}; mixed precision {}; peak memory while denoising {}", guidance_description,
            precision::to_string(run.mixed_precision), format_bytes(static_cast<double>(sampling_peak)));
  if (request.json) {
    const nlohmann::json summary = {{"outputs", written},
                                    {"prompts", request.prompts},
                                    {"frames", sampling.frames},
                                    {"height", sampling.height},
                                    {"width", sampling.width},
                                    {"steps", sampling.steps},
                                    {"cfg_scale", sampling.cfg_scale},
                                    {"grad", request.grad},
                                    {"guidance", guidance_description},
                                    {"gradient_checkpointing", checkpoint_description},
                                    {"weights_bytes", weight_bytes},
                                    {"activations_estimate_bytes", activation_estimate},
                                    {"mixed_precision", precision::to_string(run.mixed_precision)},
                                    {"text_encoder_bytes", text_encoder_bytes},
                                    {"text_encoder_peak_bytes", text_peak},
                                    {"sampling_s", sampling_seconds},
                                    {"peak_mem_bytes", sampling_peak}};
    std::cout << summary.dump() << std::endl;
  }
  return 0;
}

}  // namespace tune::recipes::latte_t2v
