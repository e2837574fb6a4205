// The Latte memory plan's activation estimate (recipes/latte/latte_memory_report) against the tracking allocator:
// a bf16-autocast Latte training step (the learned-variance diffusion loss) under each checkpointing policy.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "common/activation_memory.h"
#include "common/scoped_env.h"
#include "tune/core/memory_tracker.h"
#include "tune/diffusion/gaussian_diffusion.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/latte.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/latte/latte_memory_report.h"

namespace {

using tune::memory::CheckpointOptions;
using tune::memory::CheckpointRunner;
using tune::memory::Policy;

// Activations dominate (hidden 128 over 2 x 8 frames x 64 patches), a few seconds of bf16 on CPU.
tune::models::LatteConfig activation_heavy_config() {
  tune::models::LatteConfig config;
  config.input_size = 16;
  config.patch_size = 2;
  config.in_channels = 4;
  config.hidden_size = 128;
  config.depth = 4;
  config.num_heads = 4;
  config.num_frames = 8;
  config.extras = 1;
  return config;
}

constexpr int64_t kBatch = 2;

// Activation memory of one bf16-autocast training step (tests/common/activation_memory.h).
int64_t measure_activation_bytes(tune::models::Latte& model, const tune::diffusion::GaussianDiffusion& diffusion,
                                 const torch::Tensor& x_start, const torch::Tensor& t, const torch::Tensor& noise,
                                 const torch::Tensor& labels) {
  return tune::testing::measure_step_activation_bytes(*model, [&] {
    const tune::diffusion::ModelFn model_fn = [&](const torch::Tensor& x, const torch::Tensor& timesteps) {
      return model->forward(x, timesteps, labels);
    };
    return diffusion.training_losses(model_fn, x_start, t, noise).loss.mean();
  });
}

}  // namespace

// The default recipe's shape (recipes/latte-tiny.yaml: pixels, patch 4, hidden 64, class-conditional, batch 16),
// where the diffusion loss on the output outweighs the blocks.
tune::models::LatteConfig default_recipe_config() {
  tune::models::LatteConfig config;
  config.input_size = 16;
  config.patch_size = 4;
  config.in_channels = 3;
  config.hidden_size = 64;
  config.depth = 4;
  config.num_heads = 4;
  config.num_frames = 4;
  config.extras = 2;
  config.num_classes = 4;
  return config;
}

TEST_CASE("Latte: measured activation memory follows the estimate under every policy", "[recipes][latte][memory]") {
  tune::memory_tracker::install();
  struct Case {
    const char* name;
    tune::models::LatteConfig config;
    int64_t batch;
  };
  // Both attention cores: tune's (plain where a checkpointed block recomputes, recomputing its probabilities where
  // the graph lives until backward) and LibTorch's fused kernel (nn::attention_core_form).
  for (const bool fused : {false, true}) {
  const tune::testing::ScopedEnv core("TUNE_CPU_ATTENTION", fused ? "fused" : "plain");
  for (const Case& c : {Case{"latents-like, hidden 128", activation_heavy_config(), kBatch},
                        Case{"the default recipe's shape", default_recipe_config(), 16}}) {
    const auto& config = c.config;
    torch::manual_seed(4);
    tune::models::Latte model(config);
    model->train();
    const auto diffusion = tune::diffusion::create_diffusion({});
    const auto x_start =
        torch::randn({c.batch, config.num_frames, config.in_channels, config.input_size, config.input_size});
    const auto noise = torch::randn_like(x_start);
    const auto t = torch::randint(0, 1000, {c.batch}, torch::kLong);
    const auto labels = config.class_conditional() ? torch::randint(0, config.num_classes, {c.batch}, torch::kLong)
                                                   : torch::Tensor();
    const tune::recipes::latte::LatteActivationShape shape{c.batch, 2};

    model->set_block_runner(std::make_shared<CheckpointRunner>(CheckpointOptions{Policy::off, 2}, config.depth));
    measure_activation_bytes(model, diffusion, x_start, t, noise, labels);  // warm-up: parameter gradients
    int64_t measured_off = 0, measured_full = 0;
    for (const Policy policy : {Policy::off, Policy::full, Policy::every_k, Policy::sqrt, Policy::selective}) {
      const auto runner = std::make_shared<CheckpointRunner>(CheckpointOptions{policy, 2}, config.depth);
      model->set_block_runner(runner);
      const int64_t measured = measure_activation_bytes(model, diffusion, x_start, t, noise, labels);
      const int64_t estimate =
          tune::recipes::latte::latte_activation_estimate(config, shape, torch::kCPU, torch::kBFloat16, *runner);
      const double ratio = static_cast<double>(measured) / static_cast<double>(estimate);
      WARN(c.name << (fused ? ", fused core, " : ", ") << runner->describe() << ": measured " << measured / 1048576.0 << " MiB, estimate "
                  << estimate / 1048576.0 << " MiB (" << ratio << ")");
      CHECK(std::abs(ratio - 1.0) <= 0.10);
      if (policy == Policy::off) measured_off = measured;
      if (policy == Policy::full) measured_full = measured;
    }
    CHECK(measured_full < measured_off);
  }
  }
}

