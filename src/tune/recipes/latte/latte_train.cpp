// `tune train` for the Latte recipe: checks, the training data (videos or prepared latents) and the model, then
// the video recipes' shared loop (recipes/diffusion/diffusion_train.h), which trains as Latte's train.py does.
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/threads.h"
#include "tune/memory/checkpoint.h"
#include "tune/nn/block_runner.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/diffusion/diffusion_train.h"
#include "tune/recipes/diffusion/latent_manifest.h"
#include "tune/recipes/latte/latte_data.h"
#include "tune/recipes/latte/latte_memory_report.h"
#include "tune/recipes/latte/latte_model.h"
#include "tune/recipes/latte/latte_recipe.h"
#include "tune/recipes/run_directory.h"

namespace tune::recipes::latte {
namespace {

struct TrainingData {
  std::shared_ptr<const ClipSource> clips;
  std::vector<std::string> classes;
  bool from_latents = false;
  std::string description;  // for the log
};

// The videos of data.path, or (data.latents) latents written by `tune prepare`, checked against the recipe.
TrainingData open_training_data(const LatteSettings& latte, const config::Config& config) {
  TrainingData result;
  if (!latte.data.latents) {
    auto videos = make_video_dataset(latte);
    result.clips = video_clips(videos);
    result.classes = videos->classes();
    result.description = fmt::format("{} videos in {} classes from {}", videos->size(), result.classes.size(),
                                     *latte.data.path);
    return result;
  }
  const std::filesystem::path directory = *latte.data.latents;
  if (!latte.model.vae) {
    config.fail("model.vae", "is required with data.latents: the VAE the latents were made with gives their geometry "
                             "and decodes samples in tune infer");
  }
  const diffusion_common::LatentManifest manifest = diffusion_common::read_latent_manifest(directory);
  if (manifest.text) {
    throw InputError(fmt::format("{}: these latents hold caption embeddings (text-to-video); train them with recipe "
                                 "latte_t2v", (directory / diffusion_common::kLatentManifestName).string()));
  }
  if (!manifest.complete) {
    throw InputError(fmt::format("{}: the preparation of these latents did not finish; run `tune prepare` again to "
                                 "complete it", (directory / diffusion_common::kLatentManifestName).string()));
  }
  diffusion_common::check_latents_match(manifest, directory, latte.data, "model.vae", *latte.model.vae,
                                        models::load_autoencoder_kl_config(*latte.model.vae), config);
  auto latents = std::make_shared<const data::LatentDataset>(
      directory, latte.data.skip_bad_videos ? data::OnBadVideo::skip : data::OnBadVideo::fail);
  result.clips = latent_clips(latents, {manifest.num_frames, manifest.latent_channels, manifest.latent_size,
                                        manifest.latent_size});
  result.classes = manifest.classes;
  result.from_latents = true;
  result.description = fmt::format("{} prepared latent clips ({} videos, {} classes) from {}; no VAE in memory",
                                   latents->size(), manifest.videos, result.classes.size(), directory.string());
  return result;
}

}  // namespace

int train(const TrainRequest& request) {
  // ---- checks
  const config::Config& config = request.config;
  const RunSettings run = read_run_settings(config);
  TrainingSettings training = read_training_settings(config);
  const LatteSettings latte = read_latte_settings(config);
  validate_latte_config(config);
  // The data the recipe names exists, or the error names its key and where it was set (before anything is written).
  for (const auto& [key, path] : {std::pair{"data.path", latte.data.path}, std::pair{"data.latents", latte.data.latents}}) {
    if (path && !std::filesystem::exists(*path)) config.fail(key, fmt::format("names '{}', which does not exist", *path));
  }
  const std::filesystem::path output_dir = request.output_dir;

  // ---- setup
  const int threads = configure_threads(threads_for_this_rank(run.threads));
  memory_tracker::install();
  const torch::Device device(run.device);
  const TrainingData training_data = open_training_data(latte, config);
  run_on_main_rank([&] { prepare_run_directory(output_dir, config, request.resume_from); },
                   "prepare the run directory");

  const int64_t class_count = static_cast<int64_t>(training_data.classes.size());
  LatteParts parts = build_latte(latte, class_count, run.seed,
                                 training_data.from_latents ? VaeUse::geometry_only : VaeUse::load);
  auto& model = parts.model;
  model->to(device);
  // Before the activation estimates: they count the attention core that was chosen.
  choose_cpu_kernels(latte_workload(model->config(), training.batch_size, precision::compute_dtype(run.mixed_precision),
                                    /*training=*/true),
                     device);
  if (parts.vae) (*parts.vae)->to(device);
  if (model->config().class_conditional() && model->config().num_classes < class_count) {
    config.fail("model.num_classes", fmt::format("({}) is smaller than the {} classes of the training data ({})",
                                                 model->config().num_classes, class_count, training_data.description));
  }

  // ---- Latte as the shared loop trains it
  const auto& model_config = model->config();
  diffusion_common::DiffusionTrainee trainee;
  trainee.model = model.ptr();
  trainee.description = fmt::format("Latte {} blocks (spatial/temporal alternating), hidden {}, patch {}; input {} x "
                                    "{}x{}x{} ({})", model_config.depth, model_config.hidden_size,
                                    model_config.patch_size, model_config.num_frames, model_config.in_channels,
                                    model_config.input_size, model_config.input_size,
                                    latte.model.vae ? "VAE latents" : "pixels");
  trainee.blocks = model->blocks();
  for (int64_t i = 0; i < model->num_blocks(); ++i) trainee.block_types.emplace_back(models::LatteImpl::block_type(i));
  trainee.default_block_types = {models::LatteImpl::block_type(0), models::LatteImpl::block_type(1)};
  trainee.set_block_runner = [&](std::shared_ptr<nn::BlockRunner> runner) { model->set_block_runner(std::move(runner)); };
  trainee.learned_sigma = model_config.learn_sigma;
  // Label dropout is drawn by the loop, so which rows lose their class does not depend on the process count.
  trainee.condition_dropout = model_config.class_conditional() ? model_config.class_dropout_prob : 0.0;
  trainee.forward = [&](const torch::Tensor& x, const torch::Tensor& t, const diffusion_common::Conditioning& condition,
                        const torch::Tensor& drop) {
    return model->forward(x, t, model_config.class_conditional() ? condition.labels : torch::Tensor(), drop);
  };
  const c10::ScalarType compute_dtype = precision::compute_dtype(run.mixed_precision);
  const LatteActivationShape shape{training.batch_size, run.mixed_precision == precision::MixedPrecision::no ? 4 : 2};
  trainee.activation_estimate = [&](const memory::CheckpointRunner& runner) {
    return latte_activation_estimate(model_config, shape, device.type(), compute_dtype, runner);
  };
  trainee.save_config = [&](const std::filesystem::path& dir) {
    model_config.save((dir / "latte_config.json").string());
  };
  trainee.load_weights = [&](const std::filesystem::path& file) { load_latte_weights(model, file); };

  diffusion_common::DiffusionTrainingData data{training_data.clips, {}, training_data.description};
  if (!training_data.from_latents) {
    data.to_model_space = [&](const torch::Tensor& videos) {
      return to_model_space(parts, videos, latte.model.vae_chunk_frames);
    };
  }
  diffusion_common::DiffusionLoopSettings loop;
  loop.num_timesteps = latte.diffusion.num_timesteps;
  loop.beta_schedule = latte.diffusion.beta_schedule;
  loop.ema_decay = latte.ema_decay;
  loop.clip_start_step = latte.clip_start_step;
  loop.threads = threads;
  return diffusion_common::run_diffusion_training(request, run, training, loop, trainee, data);
}

void validate_latte_config(const config::Config& config) {
  const RunSettings run = read_run_settings(config);
  (void)read_training_settings(config);
  (void)read_distributed_settings(config);
  (void)read_latte_settings(config);
  if (run.frozen_weights_bf16) config.fail("param_dtype", "is 'bf16', but Latte trains every weight; use fp32");
  validate_shard_blocks(config, {models::LatteImpl::block_type(0), models::LatteImpl::block_type(1)});
}

}  // namespace tune::recipes::latte
