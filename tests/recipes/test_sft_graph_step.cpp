// training.cuda_graph's step (recipes/sft/sft_graph_step) run uncaptured on the CPU against the eager SFT loop's
// arithmetic (llama_loss_sum over the micro-batches, normalised by the step's loss tokens, finish_step's clipping
// and AdamW update): the device-side learning rate, token count, clipping and update must give the eager step's
// losses, gradient norms and weights. The capture itself is checked on a GPU (tests/models/test_cuda_graph_step.cpp
// and cli_cuda_graph_matches_eager).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "common/tiny_llama.h"
#include "tune/data/sft_loader.h"
#include "tune/models/llama.h"
#include "tune/recipes/sft/llama_training.h"
#include "tune/recipes/sft/sft_graph_step.h"
#include "tune/train/optimizer_step.h"

using namespace tune;

namespace {

constexpr int64_t kMaxLength = 24;

std::vector<data::TokenizedExample> examples() {
  std::vector<data::TokenizedExample> rows;
  for (int64_t i = 0; i < 24; ++i) {
    data::TokenizedExample row;
    const int64_t length = 4 + (i * 5) % 9;
    for (int64_t t = 0; t < length; ++t) {
      row.input_ids.push_back((i * 7 + t * 3) % 64);
      row.labels.push_back(t < 2 ? data::kIgnoreIndex : (i * 7 + t * 3) % 64);
    }
    rows.push_back(row);
  }
  return rows;
}

struct Trainee {
  models::LlamaForCausalLM model{nullptr};
  std::vector<train::NamedParameter> named;
  std::vector<torch::Tensor> tensors;
  std::unique_ptr<train::AdamW> optimizer;
};

Trainee make_trainee() {
  torch::manual_seed(5);
  Trainee trainee;
  trainee.model = models::LlamaForCausalLM(testing::tiny_llama_config());
  trainee.model->train();
  for (const auto& item : trainee.model->named_parameters()) {
    trainee.named.push_back({item.key(), item.value()});
    trainee.tensors.push_back(item.value());
  }
  // LibTorch's fused kernel on the CPU, the kernel the captured step needs on CUDA.
  trainee.optimizer = std::make_unique<train::AdamW>(train::make_param_groups(trainee.named, 0.01),
                                                     train::AdamWOptions{.kernel = train::AdamWKernel::fused});
  return trainee;
}

}  // namespace

TEST_CASE("sft graph step, uncaptured: the eager loop's losses, gradient norms and weights", "[recipes][cuda_graph]") {
  for (const bool chunked : {false, true}) {
    INFO("chunked loss " << chunked);
    data::LoaderOptions loader_options;
    loader_options.batch_size = 2;
    loader_options.max_length = kMaxLength;
    loader_options.seed = 1;
    loader_options.fixed_shape = true;
    data::SftLoader loader(examples(), loader_options);
    recipes::RunSettings run;
    run.mixed_precision = precision::MixedPrecision::no;
    recipes::TrainingSettings training;
    training.batch_size = 2;
    training.gradient_accumulation_steps = 2;
    training.clip_grad_norm = 0.5;  // small enough to clip
    Trainee eager = make_trainee();
    Trainee graph = make_trainee();
    recipes::sft::SftGraphStep step(graph.model, *graph.optimizer, graph.tensors, run, training, chunked, kMaxLength,
                                    torch::kCPU, /*capture=*/false);
    for (int s = 0; s < 4; ++s) {
      INFO("step " << s);
      const double lr = 1e-2 / (s + 1);
      std::vector<data::SftBatch> micro{loader.next(), loader.next()};
      const int64_t tokens = micro[0].loss_tokens + micro[1].loss_tokens;
      // The eager loop's step (sft_train.cpp), on the same fixed-shape batches and the same attention path.
      double loss = 0.0;
      for (const auto& batch : micro) {
        models::AttentionInputs attention{batch.position_ids, batch.segment_ids};
        attention.allow_plain_causal = false;
        const torch::Tensor l =
            recipes::sft::llama_loss_sum(eager.model, batch.input_ids, batch.labels, attention, chunked) / tokens;
        l.backward();
        loss += l.item<double>();
      }
      const auto expected = train::finish_step(eager.tensors, *eager.optimizer, nullptr, training.clip_grad_norm, lr,
                                               std::isfinite(loss));
      const auto outcome = step.run(micro, tokens, lr);
      CHECK(outcome.loss == Approx(loss).epsilon(1e-6));
      CHECK(outcome.grad_norm == Approx(expected.grad_norm).epsilon(1e-6));
      CHECK(expected.grad_norm > training.clip_grad_norm);
      CHECK(outcome.applied == expected.applied);
      for (size_t i = 0; i < eager.tensors.size(); ++i) {
        INFO(eager.named[i].name);
        // The update's learning rate is a float32 scalar on the device side, a double on the host's.
        CHECK((graph.tensors[i] - eager.tensors[i]).abs().max().item<double>() <= 1e-6);
      }
    }
    CHECK(graph.optimizer->steps_taken() == 4);
  }
}
