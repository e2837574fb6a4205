// Sana's activation estimate (recipes/sana/sana_memory_report) against the tracking allocator: a flow-matching
// training step and a gradient-guided sampling step (infer --grad: frozen weights, classifier-free guidance, an
// objective on the predicted clean latents differentiated with respect to the latents), in fp32 and under bf16
// autocast, with tune's plain attention core and LibTorch's fused one, under each checkpointing policy.
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
#include "tune/memory/checkpoint.h"
#include "tune/models/sana.h"
#include "tune/nn/attention_core.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/sana/sana_memory_report.h"

namespace {

using tune::memory::CheckpointOptions;
using tune::memory::CheckpointRunner;
using tune::memory::Policy;
using tune::precision::MixedPrecision;

// Activations well above the parameter-sized terms: hidden 32 (4 linear heads of 8; 2 cross heads of 16), 2 samples
// of 32 x 32 latent tokens, a 12-token caption, GLUMBConv hidden 80.
tune::models::SanaConfig small_config() {
  tune::models::SanaConfig config;
  config.num_attention_heads = 4;
  config.attention_head_dim = 8;
  config.num_cross_attention_heads = 2;
  config.cross_attention_head_dim = 16;
  config.cross_attention_dim = 32;
  config.caption_channels = 24;
  config.in_channels = config.out_channels = 4;
  config.num_layers = 2;
  config.sample_size = 32;
  return config;
}

constexpr int64_t kBatch = 2;
constexpr int64_t kLatent = 32;
constexpr int64_t kTextTokens = 12;

struct Inputs {
  torch::Tensor x, t, sigma, text, mask, noise;
};

Inputs make_inputs(const tune::models::SanaConfig& config, int64_t batch, int64_t height, int64_t width) {
  Inputs in;
  in.x = torch::randn({batch, config.in_channels, height, width});
  in.noise = torch::randn_like(in.x);
  in.sigma = torch::rand({batch});
  in.t = in.sigma * 1000;
  in.text = torch::randn({batch, kTextTokens, config.caption_channels});
  in.mask = torch::ones({batch, kTextTokens}, torch::kLong);
  in.mask.slice(1, kTextTokens - 3).fill_(0);
  return in;
}

int64_t measure(torch::nn::Module& model, const std::function<void()>& step) {
  for (auto& parameter : model.parameters()) {
    if (parameter.grad().defined()) parameter.mutable_grad().zero_();
  }
  const int64_t before = tune::memory_tracker::cpu_live_bytes();
  tune::memory_tracker::reset_cpu_peak();
  step();
  return tune::memory_tracker::cpu_peak_bytes() - before;
}

// One flow-matching training step (the official trainer's): x_t = (1 - sigma) x0 + sigma noise, the velocity
// target noise - x0, a plain MSE; forward and loss under autocast, backward outside it.
std::function<void()> training_step(tune::models::Sana& model, const Inputs& in, MixedPrecision precision) {
  return [&model, &in, precision] {
    torch::Tensor loss;
    {
      tune::precision::AutocastScope autocast(precision, torch::kCPU);
      const auto sigma = in.sigma.view({-1, 1, 1, 1});
      const auto x_t = (1 - sigma) * in.x + sigma * in.noise;
      loss = (model->forward(x_t, in.t, in.text, in.mask) - (in.noise - in.x)).pow(2).mean();
    }
    loss.backward();
  };
}

// One gradient-guided step as infer --grad takes it: frozen weights, classifier-free guidance on a doubled batch,
// the predicted clean latents x - sigma v, and an objective on them differentiated with respect to x.
std::function<void()> guided_step(tune::models::Sana& model, const Inputs& in, MixedPrecision precision) {
  return [&model, &in, precision] {
    const int64_t prompts = in.x.size(0) / 2;
    const auto x = in.x.narrow(0, 0, prompts).clone().requires_grad_(true);
    const auto t = in.t.narrow(0, 0, prompts);
    torch::Tensor velocity;
    {
      tune::precision::AutocastScope autocast(precision, torch::kCPU);
      const auto both = model->forward(torch::cat({x, x}), torch::cat({t, t}), in.text, in.mask);
      const auto parts = both.chunk(2);
      velocity = parts[0] + 4.5 * (parts[1] - parts[0]);
    }
    const auto x0 = x - in.sigma.narrow(0, 0, prompts).view({-1, 1, 1, 1}) * velocity;
    const int64_t rows = x0.size(2);
    const auto objective = (x0.narrow(2, 1, rows - 1) - x0.narrow(2, 0, rows - 1)).pow(2).mean();
    torch::autograd::grad({objective}, {x});
  };
}

void fill_zero_parameters(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (p.abs().sum().item<double>() == 0.0) p.normal_(0.0, 0.02);
  }
}

struct Result {
  std::string name;
  int64_t measured, estimate;
};

void report(const std::vector<Result>& results) {
  for (const Result& r : results) {
    const double ratio = static_cast<double>(r.measured) / static_cast<double>(r.estimate);
    std::printf("  %-50s measured %8.3f MiB  estimate %8.3f MiB  (%.3f)\n", r.name.c_str(), r.measured / 1048576.0,
                r.estimate / 1048576.0, ratio);
  }
  std::fflush(stdout);
}

constexpr Policy kPolicies[] = {Policy::off, Policy::full, Policy::every_k, Policy::sqrt, Policy::selective};

void check_policies(tune::models::Sana& model, const std::function<void()>& step,
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

tune::recipes::sana::SanaActivationShape shape_for(int64_t batch, MixedPrecision precision, bool training,
                                                   int64_t height, int64_t width) {
  tune::recipes::sana::SanaActivationShape shape;
  shape.batch = batch;
  shape.latent_height = height;
  shape.latent_width = width;
  shape.text_tokens = kTextTokens;
  shape.compute_bytes = precision == MixedPrecision::no ? 4 : 2;
  shape.training_loss = training;
  return shape;
}

void run_all(bool training, int64_t height = kLatent, int64_t width = kLatent) {
  tune::memory_tracker::install();
  const auto config = small_config();
  std::vector<Result> results;
  for (const bool fused : {false, true}) {
    const tune::testing::ScopedEnv core("TUNE_CPU_ATTENTION", fused ? "fused" : "plain");
    for (const MixedPrecision precision : {MixedPrecision::no, MixedPrecision::bf16}) {
      const auto dtype = tune::precision::compute_dtype(precision);
      std::string label = training ? "train, " : "infer --grad, ";
      if (height != width) label += std::to_string(height) + "x" + std::to_string(width) + ", ";
      label += precision == MixedPrecision::no ? "fp32" : "bf16";
      label += fused ? ", fused core" : ", plain core";
      torch::manual_seed(4);
      tune::models::Sana model(config);
      fill_zero_parameters(*model);
      if (training) {
        model->train();
      } else {
        model->eval();
        for (auto& p : model->parameters()) p.set_requires_grad(false);
      }
      const int64_t batch = training ? kBatch : 2 * kBatch;  // infer: 2 prompts, the batch doubled by guidance
      const Inputs in = make_inputs(config, batch, height, width);
      // The attention cores the run takes in each kind of block (nn::attention_core_form).
      const auto stacks = tune::recipes::stacks_with_attention_cores(
          shape_for(batch, precision, training, height, width), torch::kCPU, dtype,
          [&](const auto& each, bool selective) { return tune::recipes::sana::sana_stack(config, each, selective); });
      check_policies(model, training ? training_step(model, in, precision) : guided_step(model, in, precision),
                     stacks, label, results);
    }
  }
  report(results);
}

}  // namespace

TEST_CASE("Sana: measured activation memory follows the estimate under every policy", "[recipes][sana][memory]") {
  run_all(/*training=*/true);
}

TEST_CASE("Sana: measured infer --grad memory follows the estimate under every policy", "[recipes][sana][memory]") {
  run_all(/*training=*/false);
}

// An aspect-ratio bucket's shape (data.aspect_ratio_buckets): latents of 24 x 48, more tokens than the square case.
TEST_CASE("Sana: measured training memory follows the estimate at non-square latents", "[recipes][sana][memory]") {
  run_all(/*training=*/true, 24, 48);
}
