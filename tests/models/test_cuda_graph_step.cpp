// train::CudaGraphStep: a whole training step of the Llama model (forward, backward with checkpointing's
// recompute, the fused AdamW update) captured into a CUDA graph and replayed against the same steps run eagerly
// (the reference: the graph must change nothing but the launches). CUDA cases skip without a GPU.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/tiny_llama.h"
#include "tune/core/error.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/precision/mixed_precision.h"
#include "tune/train/adamw.h"
#include "tune/train/cuda_graph_step.h"
#include "tune/train/loss.h"

using namespace tune;

namespace {

struct Run {
  std::vector<double> losses;
  std::vector<std::pair<std::string, torch::Tensor>> trained;  // the trained parameters after the last step
};

// `steps` steps of one model, eagerly or through a CudaGraphStep; the same seed gives both the same weights.
Run train_steps(bool lora, memory::Policy policy, bool graph, int steps) {
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(7);
  models::LlamaLoraOptions lora_options;
  if (lora) {
    lora_options.lora.rank = 4;
    lora_options.lora.alpha = 8.0;
    lora_options.target_modules = {"q_proj", "v_proj", "gate_proj", "down_proj"};
  }
  models::LlamaForCausalLM model(testing::tiny_llama_config(/*tie_word_embeddings=*/true), lora_options);
  if (lora) model->freeze_base_weights();
  model->to(cuda);
  model->train();
  memory::CheckpointOptions checkpointing;
  checkpointing.policy = policy;
  model->set_block_runner(std::make_shared<memory::CheckpointRunner>(checkpointing, 2));
  std::vector<train::NamedParameter> trainable;
  for (const auto& named : model->named_parameters()) {
    if (named.value().requires_grad()) trainable.push_back({named.key(), named.value()});
  }
  train::AdamW optimizer(train::make_param_groups(trainable, 0.01), train::AdamWOptions{});
  const torch::Tensor ids = torch::randint(0, 64, {2, 24}, torch::kLong).to(cuda);
  auto step = [&] {
    torch::Tensor loss;
    {
      precision::AutocastScope autocast(precision::MixedPrecision::bf16, cuda);
      loss = train::causal_lm_loss_sum(model->forward(ids), ids);
    }
    loss.backward();
    optimizer.step(1e-2);
    return loss;
  };
  Run run;
  if (graph) {
    train::CudaGraphStep captured(step, [&] { optimizer.zero_grad(); }, cuda, /*eager_steps=*/2);
    for (int i = 0; i < steps; ++i) {
      run.losses.push_back(captured.run().item<double>());
      CHECK(captured.captured() == (i >= 2));
    }
    CHECK(captured.capture_peak_bytes() > 0);
  } else {
    for (int i = 0; i < steps; ++i) {
      run.losses.push_back(step().item<double>());
      optimizer.zero_grad();
    }
  }
  for (const auto& named : trainable) run.trained.emplace_back(named.name, named.tensor.detach().cpu());
  return run;
}

}  // namespace

TEST_CASE("cuda graph step: refused off the GPU with a clear error") {
  auto nothing = [] { return torch::zeros({}); };
  REQUIRE_THROWS_AS(train::CudaGraphStep(nothing, [] {}, torch::Device(torch::kCPU)), UsageError);
  if (!train::cuda_graphs_available()) {
    REQUIRE_THROWS_WITH(train::CudaGraphStep(nothing, [] {}, torch::Device(torch::kCPU)),
                        Catch::Contains("CUDA LibTorch"));
  }
}

TEST_CASE("cuda graph step: replays match the eager steps (LoRA with checkpointing, full fine-tune without)",
          "[cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: the CUDA case is not exercised");
    return;
  }
  struct Case {
    const char* name;
    bool lora;
    memory::Policy policy;
  };
  for (const Case& c : {Case{"lora, policy full", true, memory::Policy::full},
                        Case{"full fine-tune, policy off (tied embeddings)", false, memory::Policy::off}}) {
    INFO(c.name);
    const int steps = 6;  // 2 eager, the capture's replay, 3 replays
    const Run eager = train_steps(c.lora, c.policy, /*graph=*/false, steps);
    const Run graph = train_steps(c.lora, c.policy, /*graph=*/true, steps);
    REQUIRE(graph.losses.size() == eager.losses.size());
    for (size_t i = 0; i < eager.losses.size(); ++i) {
      INFO("step " << i);
      // The same kernels in the same order; only the attention backward's atomics may reorder sums.
      CHECK(graph.losses[i] == Approx(eager.losses[i]).epsilon(1e-4));
    }
    CHECK(eager.losses.back() < eager.losses.front());  // the steps trained something
    REQUIRE(graph.trained.size() == eager.trained.size());
    for (size_t i = 0; i < eager.trained.size(); ++i) {
      INFO(eager.trained[i].first);
      CHECK((graph.trained[i].second - eager.trained[i].second).abs().max().item<double>() <= 1e-4);
    }
  }
}
