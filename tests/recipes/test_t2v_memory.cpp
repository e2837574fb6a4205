// The text-to-video Latte's activation estimate (recipes/latte_t2v/t2v_memory_report) against the tracking
// allocator: a training step (the learned-variance diffusion loss) and a gradient-guided DDIM step (infer --grad),
// in fp32 and under bf16 autocast, with tune's plain attention core and LibTorch's fused one, under each
// checkpointing policy.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "tune/core/memory_tracker.h"
#include "tune/diffusion/gaussian_diffusion.h"
#include "tune/diffusion/sampler.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/latte_t2v.h"
#include "tune/nn/attention_core.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/diffusion/video_guidance.h"
#include "tune/recipes/latte_t2v/t2v_memory_report.h"

namespace {

using tune::memory::CheckpointOptions;
using tune::memory::CheckpointRunner;
using tune::memory::Policy;
using tune::precision::MixedPrecision;

// Small enough for a fraction of a second per step on CPU, with activations well above the parameter-sized terms:
// hidden 24 (3 heads x 8) over 2 samples x 8 frames x 64 patches, a 12-token caption.
tune::models::LatteT2VConfig small_config() {
  tune::models::LatteT2VConfig config;
  config.num_attention_heads = 3;
  config.attention_head_dim = 8;
  config.cross_attention_dim = 24;
  config.caption_channels = 32;
  config.in_channels = 4;
  config.out_channels = 8;
  config.num_layers = 2;
  config.sample_size = 8;
  config.patch_size = 2;
  config.video_length = 8;
  return config;
}

constexpr int64_t kBatch = 2;
constexpr int64_t kFrames = 8;
constexpr int64_t kLatent = 16;
constexpr int64_t kTextTokens = 12;

struct Inputs {
  torch::Tensor x, t, text, mask, noise;
};

Inputs make_inputs(const tune::models::LatteT2VConfig& config, int64_t batch) {
  Inputs in;
  in.x = torch::randn({batch, kFrames, config.in_channels, kLatent, kLatent});
  in.noise = torch::randn_like(in.x);
  in.t = torch::randint(0, 1000, {batch}, torch::kLong);
  in.text = torch::randn({batch, kTextTokens, config.caption_channels});
  in.mask = torch::ones({batch, kTextTokens}, torch::kLong);
  in.mask.slice(1, kTextTokens - 3).fill_(0);  // padded caption tokens, as the prepared captions have
  return in;
}

// Peak live CPU tensor bytes during `step()` minus the live bytes before it; parameter gradients left by an earlier
// step are zeroed in place first (tests/common/activation_memory.h does the same for bf16 only).
int64_t measure(torch::nn::Module& model, const std::function<void()>& step) {
  for (auto& parameter : model.parameters()) {
    if (parameter.grad().defined()) parameter.mutable_grad().zero_();
  }
  const int64_t before = tune::memory_tracker::cpu_live_bytes();
  tune::memory_tracker::reset_cpu_peak();
  step();
  return tune::memory_tracker::cpu_peak_bytes() - before;
}

// One training step: the model's forward and the loss under autocast (when asked), backward outside it.
std::function<void()> training_step(tune::models::LatteT2V& model, const tune::diffusion::GaussianDiffusion& diffusion,
                                    const Inputs& in, MixedPrecision precision) {
  return [&model, &diffusion, &in, precision] {
    torch::Tensor loss;
    {
      tune::precision::AutocastScope autocast(precision, torch::kCPU);
      const tune::diffusion::ModelFn model_fn = [&](const torch::Tensor& x, const torch::Tensor& timesteps) {
        return model->forward(x, timesteps, in.text, in.mask);
      };
      loss = diffusion.training_losses(model_fn, in.x, in.t, in.noise).loss.mean();
    }
    loss.backward();
  };
}

// One gradient-guided DDIM step as `tune infer --grad` takes it (recipes/latte_t2v/t2v_infer.cpp): frozen weights,
// classifier-free guidance on a doubled batch, the eps channels, video_guidance's smoothness objective.
std::function<void()> guided_step(tune::models::LatteT2V& model, const tune::diffusion::GaussianDiffusion& diffusion,
                                  const Inputs& in, MixedPrecision precision) {
  return [&model, &diffusion, &in, precision] {
    const int64_t prompts = in.x.size(0) / 2;
    const auto x = in.x.narrow(0, 0, prompts);
    const int64_t eps_channels = model->config().in_channels;
    const tune::diffusion::ModelFn eps_model = [&](const torch::Tensor& latents, const torch::Tensor& t) {
      tune::precision::AutocastScope autocast(precision, torch::kCPU);
      const auto both = model->forward(torch::cat({latents, latents}), torch::cat({t, t}), in.text);
      const auto parts = both.chunk(2);
      return (parts[0] + 4.5 * (parts[1] - parts[0])).narrow(2, 0, eps_channels);
    };
    tune::recipes::diffusion_common::VideoGuidanceObjective objective;
    tune::diffusion::SamplerOptions options;
    options.guidance = tune::recipes::diffusion_common::make_video_guidance(objective);
    const auto t = torch::full({prompts}, 20, torch::kLong);
    tune::diffusion::ddim_sample(diffusion, eps_model, x, t, in.noise.narrow(0, 0, prompts), options);
  };
}

// Nonzero cross-attention outputs, proj_out and biases (reset_parameters zeroes them), as a trained model has them.
void fill_zero_parameters(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (p.abs().sum().item<double>() == 0.0) p.normal_(0.0, 0.02);
  }
}

const char* precision_name(MixedPrecision precision) { return precision == MixedPrecision::no ? "fp32" : "bf16"; }

struct Result {
  std::string name;
  int64_t measured, estimate;
};

void report(const std::vector<Result>& results) {
  for (const Result& r : results) {
    const double ratio = static_cast<double>(r.measured) / static_cast<double>(r.estimate);
    std::printf("  %-58s measured %8.3f MiB  estimate %8.3f MiB  (%.3f)\n", r.name.c_str(), r.measured / 1048576.0,
                r.estimate / 1048576.0, ratio);
  }
  std::fflush(stdout);
}

constexpr Policy kPolicies[] = {Policy::off, Policy::full, Policy::every_k, Policy::sqrt, Policy::selective};

// Runs `step` under every policy and checks the measured peak against the estimate (test_latte_memory's ±10%).
void check_policies(tune::models::LatteT2V& model, const std::function<void()>& step,
                    const tune::recipes::RunnerStacks& stacks, const std::string& label,
                    std::vector<Result>& results) {
  const int64_t blocks = model->num_blocks();
  model->set_block_runner(std::make_shared<CheckpointRunner>(CheckpointOptions{Policy::off, 2}, blocks));
  measure(*model, step);  // warm-up: parameter gradients, kernel choices
  int64_t measured_off = 0, measured_full = 0;
  for (const Policy policy : kPolicies) {
    const auto runner = std::make_shared<CheckpointRunner>(CheckpointOptions{policy, 2}, blocks);
    model->set_block_runner(runner);
    const int64_t measured = measure(*model, step);
    const int64_t estimate = tune::recipes::estimate_for_runner(stacks.plain, stacks.selective, *runner);
    const double ratio = static_cast<double>(measured) / static_cast<double>(estimate);
    results.push_back({label + ", " + tune::memory::policy_name(policy), measured, estimate});
    INFO(label << ", " << runner->describe() << ": measured " << measured / 1048576.0 << " MiB, estimate "
               << estimate / 1048576.0 << " MiB (" << ratio << ")");
    CHECK(std::abs(ratio - 1.0) <= 0.10);
    if (policy == Policy::off) measured_off = measured;
    if (policy == Policy::full) measured_full = measured;
  }
  CHECK(measured_full < measured_off);
}

tune::recipes::latte_t2v::T2VActivationShape shape_for(int64_t batch, MixedPrecision precision,
                                                       bool training) {
  tune::recipes::latte_t2v::T2VActivationShape shape;
  shape.batch = batch;
  shape.frames = kFrames;
  shape.latent_height = kLatent;
  shape.latent_width = kLatent;
  shape.text_tokens = kTextTokens;
  shape.compute_bytes = precision == MixedPrecision::no ? 4 : 2;
  shape.training_loss = training;
  return shape;
}

}  // namespace

TEST_CASE("LatteT2V: measured activation memory follows the estimate under every policy",
          "[recipes][latte_t2v][memory]") {
  tune::memory_tracker::install();
  const auto config = small_config();
  std::vector<Result> results;
  // Both attention cores: tune's (nn::attention_core_form: plain or recomputing by block) and LibTorch's fused
  // kernel.
  for (const bool fused : {false, true}) {
    const tune::testing::ScopedEnv core("TUNE_CPU_ATTENTION", fused ? "fused" : "plain");
    for (const MixedPrecision precision : {MixedPrecision::no, MixedPrecision::bf16}) {
      const auto dtype = tune::precision::compute_dtype(precision);
      std::string label = "train, ";
      label += precision_name(precision);
      label += fused ? ", fused core" : ", plain core";
      torch::manual_seed(4);
      tune::models::LatteT2V model(config);
      model->train();
      fill_zero_parameters(*model);
      const auto diffusion = tune::diffusion::create_diffusion({});
      const Inputs in = make_inputs(config, kBatch);
      // The attention cores the run takes in each kind of block (nn::attention_core_form).
      const auto stacks = tune::recipes::stacks_with_attention_cores(
          shape_for(kBatch, precision, true), torch::kCPU, dtype,
          [&](const auto& each, bool selective) { return tune::recipes::latte_t2v::latte_t2v_stack(config, each, selective); });
      check_policies(model, training_step(model, diffusion, in, precision), stacks, label, results);
    }
  }
  report(results);
}

TEST_CASE("LatteT2V: measured infer --grad memory follows the estimate under every policy",
          "[recipes][latte_t2v][memory]") {
  tune::memory_tracker::install();
  const auto config = small_config();
  std::vector<Result> results;
  for (const bool fused : {false, true}) {
    const tune::testing::ScopedEnv core("TUNE_CPU_ATTENTION", fused ? "fused" : "plain");
    for (const MixedPrecision precision : {MixedPrecision::no, MixedPrecision::bf16}) {
      const auto dtype = tune::precision::compute_dtype(precision);
      std::string label = "infer --grad, ";
      label += precision_name(precision);
      label += fused ? ", fused core" : ", plain core";
      torch::manual_seed(4);
      tune::models::LatteT2V model(config);
      model->eval();
      fill_zero_parameters(*model);
      for (auto& p : model->parameters()) p.set_requires_grad(false);
      tune::diffusion::DiffusionOptions options;
      options.timestep_respacing = "ddim50";
      options.process.var_type = tune::diffusion::ModelVarType::FixedSmall;
      const auto diffusion = tune::diffusion::create_diffusion(options);
      // Two prompts: the model runs on 4 samples (classifier-free guidance doubles the batch).
      const Inputs in = make_inputs(config, 2 * kBatch);
      // The attention cores the run takes in each kind of block (nn::attention_core_form).
      const auto stacks = tune::recipes::stacks_with_attention_cores(
          shape_for(2 * kBatch, precision, false), torch::kCPU, dtype,
          [&](const auto& each, bool selective) { return tune::recipes::latte_t2v::latte_t2v_stack(config, each, selective); });
      check_policies(model, guided_step(model, diffusion, in, precision), stacks, label, results);
    }
  }
  report(results);
}

