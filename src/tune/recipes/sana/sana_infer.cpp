// `tune infer` for Sana (a diffusers SanaPipeline directory): prompts -> Gemma 2 caption embeddings (the encoder
// freed before denoising) -> DPM-Solver++ or flow-matching Euler over the transformer with classifier-free guidance
// -> DC-AE's image. With --grad the sampling keeps autograd on (gradient-guided sampling through checkpointed
// blocks): every Sana block goes through tune's checkpointing whenever gradients are on, by construction, where
// diffusers' flag does nothing until enable_gradient_checkpointing() has run.
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
#include "tune/diffusion/aspect_ratio_bins.h"
#include "tune/diffusion/scheduler_config.h"
#include "tune/diffusion/scheduler_sampler.h"
#include "tune/io/run_checkpoints.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/dc_ae.h"
#include "tune/models/gemma2_text_encoder.h"
#include "tune/models/sana.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/cpu_kernel_choice.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/diffusion/pipeline_components.h"
#include "tune/recipes/diffusion/reference_frame.h"
#include "tune/recipes/diffusion/sample_files.h"
#include "tune/recipes/diffusion/image_guidance.h"
#include "tune/recipes/sana/sana_memory_report.h"
#include "tune/recipes/sana/sana_model.h"
#include "tune/recipes/sana/sana_prompt.h"
#include "tune/recipes/sana/sana_recipe.h"
#include "tune/recipes/sana/sana_settings.h"

namespace tune::recipes::sana {
namespace {

void apply_request(const InferRequest& request, SanaSamplingSettings& sampling) {
  if (request.class_label) throw UsageError("--class applies to class-conditional Latte; Sana samples from --prompt");
  if (request.raw) throw UsageError("--raw applies to LLM recipes (it skips the chat template); this is Sana");
  if (request.max_new_tokens >= 0 || request.temperature >= 0 || request.top_p >= 0) {
    throw UsageError("--max-new-tokens, --temperature and --top-p apply to LLM recipes, not to Sana");
  }
  if (request.frames) throw UsageError("--frames applies to video recipes; Sana samples images");
  if (request.sampler) throw UsageError("--sampler: Sana samples with the pipeline's scheduler (model.scheduler=DIR to change it)");
  if (request.num_samples) throw UsageError("--num-samples: give one --prompt per image (--prompts-file for several)");
  if (request.steps) sampling.steps = *request.steps;
  if (request.cfg_scale) sampling.cfg_scale = *request.cfg_scale;
  if (request.negative_prompt) sampling.negative_prompt = *request.negative_prompt;
  if (request.height) sampling.height = *request.height;
  if (request.width) sampling.width = *request.width;
}

// The initial latents in diffusers' layout [B, C, h, w]: a --noise file's one tensor, or torch.randn with the seed.
torch::Tensor initial_latents(const std::optional<std::filesystem::path>& noise_file, at::IntArrayRef shape,
                              at::Generator& generator) {
  if (!noise_file) return torch::randn(shape, generator, torch::kFloat32);
  const auto file = io::SafetensorsFile::open(*noise_file);
  if (file.entries().size() != 1) {
    throw InputError(fmt::format("{}: --noise expects a file with one tensor (the initial latents), found {}",
                                 noise_file->string(), file.entries().size()));
  }
  const std::string name = file.entries().begin()->first;
  const auto noise = file.load(name).to(torch::kFloat32);
  if (noise.sizes() != shape) {
    throw InputError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}] ([batch, channels, height/f, width/f], "
                                 "diffusers' layout) for these prompts, --height and --width",
                                 noise_file->string(), name, fmt::join(noise.sizes(), ", "), fmt::join(shape, ", ")));
  }
  return noise;
}

const char* scheduler_name(const diffusion::SchedulerConfig& scheduler) {
  return scheduler.kind == diffusion::SchedulerKind::dpm_solver_multistep ? "DPM-Solver++" : "flow-matching Euler";
}

}  // namespace

int infer(const InferRequest& request) {
  if (!request.config) throw UsageError("Sana samples from a pipeline directory or a recipe");
  if (request.prompts.empty()) throw UsageError("Sana needs --prompt TEXT (or --prompts-file)");
  const RunSettings run = read_run_settings(*request.config);
  SanaSettings settings = read_sana_settings(*request.config);
  auto& sampling = settings.sampling;
  apply_request(request, sampling);
  const auto& model_settings = settings.model;
  const SanaComponents components = resolve_sana_components(model_settings);
  const std::map<std::string, std::filesystem::path> paths = {
      {"transformer", components.transformer}, {"vae", components.vae}, {"text_encoder", components.text_encoder},
      {"tokenizer", components.tokenizer}, {"scheduler", components.scheduler}};
  // A run directory samples with its newest checkpoint's (or the one named) transformer (the EMA weights; the EMA adapters over the
  // pipeline's weights after LoRA) in place of the pipeline's.
  std::optional<std::filesystem::path> checkpoint;
  if (request.run_dir) {
    checkpoint = inference_checkpoint(request);
    if (!checkpoint) {
      throw UsageError(fmt::format("no trained checkpoint in {}: train first (tune train), or sample from the "
                                   "pipeline directory itself", request.run_dir->string()));
    }
  }
  const auto scheduler_file = paths.at("scheduler") / "scheduler_config.json";
  const auto scheduler = diffusion::read_scheduler_config(scheduler_file);
  if (!scheduler.flow()) {
    throw InputError(fmt::format("{}: Sana predicts a flow velocity; this scheduler config is not a flow-matching one "
                                 "(DPMSolverMultistepScheduler needs use_flow_sigmas true and prediction_type "
                                 "flow_prediction, or use FlowMatchEulerDiscreteScheduler)", scheduler_file.string()));
  }
  const auto transformer_config_file = checkpoint ? *checkpoint / "config.json" : components.transformer / "config.json";
  const auto config = models::read_sana_config(transformer_config_file);
  const auto vae_config = models::load_autoencoder_dc_config(paths.at("vae"));
  const int64_t factor = vae_config.spatial_compression_ratio();
  if (vae_config.latent_channels != config.in_channels) {
    throw InputError(fmt::format("{}: the VAE has {} latent channels, the transformer ({}) takes {}",
                                 paths.at("vae").string(), vae_config.latent_channels,
                                 paths.at("transformer").string(), config.in_channels));
  }
  // SanaPipeline's resolution binning: generate at the table's nearest size, crop back to the one asked at the end.
  const int64_t asked_height = sampling.height, asked_width = sampling.width;
  if (sampling.resolution_binning) {
    if (const auto bin = diffusion::aspect_ratio_bin(config.sample_size, sampling.height, sampling.width)) {
      sampling.height = bin->height;
      sampling.width = bin->width;
      if (sampling.height != asked_height || sampling.width != asked_width) {
        log::info("resolution binning: {}x{} is generated at {}x{} (aspect-ratio bin {} of the table for "
                  "sample_size {}), then scaled and cropped back (sampling.resolution_binning=false: the size as "
                  "asked)", asked_width, asked_height, sampling.width, sampling.height, bin->ratio,
                  config.sample_size);
      }
    } else {
      log::info("resolution binning: no aspect-ratio table for a transformer of sample_size {} (tables: 16, 32, 64, "
                "128); sampling at the size asked", config.sample_size);
    }
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
  const bool cfg = sampling.cfg_scale > 1.0;  // SanaPipeline: guidance_scale > 1
  const auto batch = static_cast<int64_t>(request.prompts.size());

  // ---- text: Gemma 2 runs once, under no-grad, and is gone before the transformer is loaded
  memory_tracker::reset_peak(cuda);
  SanaCaptions text, negative;
  int64_t text_encoder_bytes = 0;
  {
    const auto tokenizer = data::Tokenizer::load(paths.at("tokenizer"));
    auto encoder = models::Gemma2TextEncoder::load(
        paths.at("text_encoder"), text_encoder_dtype(model_settings.text_encoder_dtype, run.mixed_precision));
    encoder.model()->to(device);
    for (const auto& p : encoder.model()->parameters()) text_encoder_bytes += p.numel() * p.element_size();
    const TextEncoderFn encode = [&](const torch::Tensor& ids, const torch::Tensor& mask) {
      return encoder.forward(ids.to(device), mask.to(device));
    };
    const auto instruction = sampling.complex_human_instruction ? default_complex_human_instruction()
                                                                : std::vector<std::string>{};
    text = encode_sana_captions(encode, tokenizer, request.prompts, sampling.max_text_tokens, instruction);
    if (cfg) {
      const std::vector<std::string> negatives(request.prompts.size(), sampling.negative_prompt);
      negative = encode_sana_captions(encode, tokenizer, negatives, sampling.max_text_tokens, {});
    }
  }
  const int64_t text_peak = memory_tracker::peak_bytes(cuda);
  log::info("text encoder: {} of weights, peak {} while encoding {} prompt(s) ({} caption tokens{}); freed before "
            "denoising", format_bytes(static_cast<double>(text_encoder_bytes)),
            format_bytes(static_cast<double>(text_peak)), batch, sampling.max_text_tokens,
            sampling.complex_human_instruction ? ", with the complex human instruction" : "");

  const int64_t latent_h = sampling.height / factor, latent_w = sampling.width / factor;
  // ---- guidance.reference (--grad): the reference image in latent space; the VAE is freed again until decoding
  torch::Tensor reference_latents;
  if (request.grad && settings.guidance.reference) {
    torch::NoGradGuard no_grad;
    auto vae = models::load_autoencoder_dc(paths.at("vae"));
    vae->to(device);
    vae->eval();
    const auto pixels = diffusion_common::read_reference_pixels(*settings.guidance.reference, sampling.height,
                                                                sampling.width);
    // read_reference_pixels gives [1, 3, H, W]: a batch of one image, as DC-AE encodes.
    reference_latents = vae->encode_latents(pixels.reshape({1, 3, sampling.height, sampling.width}).to(device))[0];
  }

  // ---- the transformer, its blocks behind tune's checkpointing
  models::Sana model = load_sana_transformer(transformer_config_file, components.transformer, settings.lora, checkpoint);
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
  const std::string checkpoint_description = checkpointing->describe();
  log::info("gradient checkpointing: {} SanaTransformerBlock (active whenever gradients are on, in training and in "
            "infer --grad)", checkpoint_description);
  int64_t weight_bytes = 0;
  for (const auto& p : model->parameters()) weight_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  const auto compute_dtype = precision::compute_dtype(run.mixed_precision);
  choose_cpu_kernels(sana_workload(config, cfg ? 2 * batch : batch, latent_h, latent_w, sampling.max_text_tokens,
                                   compute_dtype, /*training=*/request.grad),
                     device);
  int64_t activation_estimate = 0;
  if (request.grad) {
    SanaActivationShape shape;
    shape.batch = cfg ? 2 * batch : batch;
    shape.latent_height = latent_h;
    shape.latent_width = latent_w;
    shape.text_tokens = sampling.max_text_tokens;
    shape.compute_bytes = run.mixed_precision == precision::MixedPrecision::no ? 4 : 2;
    shape.training_loss = false;
    activation_estimate = sana_activation_estimate(config, shape, device.type(), compute_dtype, *checkpointing);
    log::info("memory plan while denoising: transformer weights {}, activations of a guided step ~{} (batch {}{}): "
              "~{} in all; the text encoder is gone", format_bytes(static_cast<double>(weight_bytes)),
              format_bytes(static_cast<double>(activation_estimate)), shape.batch, cfg ? ", CFG-doubled" : "",
              format_bytes(static_cast<double>(weight_bytes + activation_estimate)));
  }

  // ---- denoising: classifier-free guidance on the velocity, SanaPipeline's order (negative first)
  const auto text_both = cfg ? torch::cat({negative.text, text.text}).to(device) : text.text.to(device);
  const auto mask_both = cfg ? torch::cat({negative.mask, text.mask}).to(device) : text.mask.to(device);
  const double scale = sampling.cfg_scale;
  auto velocity = [&](const torch::Tensor& x, const torch::Tensor& t) {
    precision::AutocastScope autocast(run.mixed_precision, device);
    // SanaPipeline: timestep * transformer.config.timestep_scale
    const auto model_t = t.to(torch::kFloat64) * config.timestep_scale;
    torch::Tensor prediction;
    if (cfg) {
      const auto parts =
          model->forward(torch::cat({x, x}), torch::cat({model_t, model_t}), text_both, mask_both).chunk(2);
      prediction = parts[0] + scale * (parts[1] - parts[0]);
    } else {
      prediction = model->forward(x, model_t, text_both, mask_both);
    }
    // SanaPipeline's learned-sigma rule: an output of twice the latent channels keeps its first half.
    return config.out_channels == 2 * config.in_channels ? prediction.narrow(1, 0, config.in_channels) : prediction;
  };
  diffusion_common::ImageGuidanceObjective objective;
  std::string guidance_description = "off";
  diffusion::GuidanceFn guidance;
  if (request.grad) {
    if (settings.guidance.reference) {
      objective.reference = reference_latents;
      objective.reference_weight = settings.guidance.reference_weight;
    }
    objective.smoothness_weight = settings.guidance.smoothness_weight;
    guidance = diffusion_common::make_image_guidance(objective);
    guidance_description = diffusion_common::describe(objective);
  }

  at::Generator generator = at::detail::createCPUGenerator(run.seed);
  torch::Tensor latents =
      initial_latents(request.noise, {batch, config.in_channels, latent_h, latent_w}, generator).to(device);
  diffusion::SchedulerStepper stepper(scheduler, sampling.steps);
  memory_tracker::reset_peak(cuda);
  const auto sampling_start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < stepper.num_steps(); ++step) {
    const auto t = stepper.model_timesteps(step, batch, device);
    torch::Tensor v;
    if (request.grad) {
      // Gradient guidance on the predicted clean latents x0 = x - sigma v: the velocity is moved by the gradient of
      // the objective L(x0) with respect to x, v' = v + grad_x L (so x0' = x0 - sigma grad_x L), through every
      // checkpointed block.
      const auto x = latents.detach().requires_grad_(true);
      const auto raw = velocity(x, t);
      const auto x0 = x - stepper.sigma(step) * raw;
      const auto g = guidance(x, t, x0);
      v = raw.detach() - g;
    } else {
      torch::NoGradGuard no_grad;
      v = velocity(latents, t);
    }
    latents = stepper.step(step, latents, v.to(latents.scalar_type())).sample;
    log::info("step {}/{}", step + 1, stepper.num_steps());
  }
  const double sampling_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sampling_start).count();
  const int64_t sampling_peak = memory_tracker::peak_bytes(cuda);
  model = nullptr;  // the transformer's weights go before the VAE decodes

  // ---- images
  torch::NoGradGuard no_grad;
  auto vae = models::load_autoencoder_dc(paths.at("vae"));
  if (model_settings.vae_tiling) vae->set_tiling({true, 512, 512, 448, 448});
  vae->to(device);
  vae->eval();
  // Binned: scaled and cropped to the size asked before the clamp, as SanaPipeline's resize precedes postprocess.
  const auto images =
      diffusion::resize_and_crop(vae->decode(latents.to(torch::kFloat32)), asked_height, asked_width)
          .clamp(-1.0, 1.0)
          .cpu();
  const std::filesystem::path out =
      request.out ? *request.out
                  : std::filesystem::path(request.config->get_string("output_dir")) / "samples" / "sample.png";
  std::vector<std::string> written;
  for (int64_t i = 0; i < batch; ++i) {
    const auto path = diffusion_common::numbered_path(out, i, batch);
    // .safetensors also keeps the final latents in diffusers' layout [1, C, h, w], to compare with other tools.
    diffusion_common::write_image_sample(path, images[i], {{"latents", latents[i].unsqueeze(0).cpu()}});
    log::info("wrote {}", path.string());
    written.push_back(path.string());
  }
  log::info("sampled {} image(s) at {}x{}{} with {} {} steps, cfg scale {}", batch, asked_width, asked_height,
            asked_height != sampling.height || asked_width != sampling.width
                ? fmt::format(" (generated at {}x{})", sampling.width, sampling.height)
                : std::string(),
            scheduler_name(scheduler), sampling.steps, sampling.cfg_scale);
  log::info("gradient guidance: {}; mixed precision {}; peak memory while denoising {}", guidance_description,
            precision::to_string(run.mixed_precision), format_bytes(static_cast<double>(sampling_peak)));
  if (request.json) {
    const nlohmann::json summary = {{"outputs", written},
                                    {"prompts", request.prompts},
                                    {"height", asked_height},
                                    {"width", asked_width},
                                    {"generated_height", sampling.height},
                                    {"generated_width", sampling.width},
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

}  // namespace tune::recipes::sana
