// training.cuda_graph for the SFT recipe: the whole optimizer step (every micro-batch's forward and backward, the
// gradient clipping, the AdamW update) captured into a CUDA graph once and replayed with one launch per step
// (train/cuda_graph_step.h), for runs whose pace is the host's kernel launches (LoRA at small batches: measured
// 1.9x faster on an H200, docs/BENCHMARKS.md). Nothing in the captured step is decided on the host: the batches
// are copied into fixed device tensors (the loader's fixed_shape: batch_size rows of max_length tokens), the
// learning rate and the loss's token count are device scalars filled before each replay, the clipping factor and
// the skip of a non-finite step are computed on the device (clip_grad_norm_on_device, AdamW::step_on_device),
// and attention always takes the mask path. check_cuda_graph_settings says which runs qualify.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "tune/config/config.h"
#include "tune/data/sft_loader.h"
#include "tune/models/llama.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/common_schema.h"
#include "tune/train/adamw.h"
#include "tune/train/cuda_graph_step.h"

namespace tune::recipes::sft {

// Refuses (config.fail on training.cuda_graph, exit 2) what a captured step cannot do, from the config (tune
// validate): a LibTorch without CUDA, a device other than CUDA, fp16 (its loss scaler decides on the host), LoRA
// dropout (drawn on the host per row), checkpointing.policy offload (pinned host buffers allocated as the step
// runs), an optimizer off the fused kernel (optimizer.state_dtype bf16 or optimizer.fused false).
void check_cuda_graph_config(const config::Config& config, const RunSettings& run, const TrainingSettings& training,
                             double lora_dropout);
// And from the run: several processes, soft-capped attention (Gemma 2: tune's own core reads its mask on the
// host), a trained parameter off the fused kernel.
void check_cuda_graph_run(const config::Config& config, const models::LlamaForCausalLM& model,
                          const train::AdamW& optimizer, bool distributed);

class SftGraphStep {
 public:
  // `capture` false runs the same step uncaptured every time (on any device): what the tests compare with the
  // eager loop's arithmetic where no GPU is at hand.
  SftGraphStep(models::LlamaForCausalLM& model, train::AdamW& optimizer, std::vector<torch::Tensor> trained,
               const RunSettings& run, const TrainingSettings& training, bool chunked_loss, int64_t max_length,
               torch::Device device, bool capture = true);

  struct Outcome {
    double loss = 0.0;       // the step's mean loss over its loss tokens
    double grad_norm = 0.0;  // before clipping
    bool applied = true;     // false: a non-finite loss or norm skipped the update
  };
  // One optimizer step on `micro_batches` (gradient_accumulation_steps of them, each fixed_shape) normalised by
  // `loss_tokens`, at learning rate `lr`. The first call runs eagerly (warm-up), the second captures and replays,
  // the rest replay. Waits for the device (the outcome is read).
  Outcome run(const std::vector<data::SftBatch>& micro_batches, int64_t loss_tokens, double lr);

  // The allocator's peak while the step was captured (its working set, held in the graph's pool between replays,
  // where the allocator's counters cannot see it), and that pool's reserved bytes; 0 before capture.
  int64_t capture_peak_bytes() const { return graph_ ? graph_->capture_peak_bytes() : 0; }
  int64_t pool_reserved_bytes() const { return graph_ ? graph_->capture_reserved_bytes() : 0; }
  bool captured() const { return graph_ && graph_->captured(); }

 private:
  torch::Tensor step();  // what is captured

  models::LlamaForCausalLM& model_;
  train::AdamW& optimizer_;
  std::vector<torch::Tensor> trained_;
  precision::MixedPrecision precision_;
  double clip_grad_norm_;
  bool chunked_loss_;
  torch::Device device_;
  // The step's inputs, in fixed device tensors: one set per micro-batch.
  std::vector<torch::Tensor> input_ids_, labels_, position_ids_, segment_ids_;
  torch::Tensor lr_;           // float32 scalar
  torch::Tensor loss_tokens_;  // float32 scalar: max(1, the step's loss tokens)
  std::unique_ptr<train::CudaGraphStep> graph_;  // null: uncaptured (capture false)
};

}  // namespace tune::recipes::sft
