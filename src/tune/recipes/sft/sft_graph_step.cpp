#include "tune/recipes/sft/sft_graph_step.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "tune/core/error.h"
#include "tune/recipes/sft/llama_training.h"

namespace tune::recipes::sft {

namespace {

[[noreturn]] void refuse(const config::Config& config, const std::string& why) {
  config.fail("training.cuda_graph", "is true, but " + why + "; set training.cuda_graph: false");
}

}  // namespace

void check_cuda_graph_config(const config::Config& config, const RunSettings& run, const TrainingSettings& training,
                             double lora_dropout) {
  if (!train::cuda_graphs_available()) refuse(config, "this tune was built against a LibTorch without CUDA");
  if (run.device != "cuda") {
    refuse(config, fmt::format("the run's device is {} (a CUDA graph needs device: cuda)", run.device));
  }
  if (run.mixed_precision == precision::MixedPrecision::fp16) {
    refuse(config, "mixed_precision fp16's loss scaler decides each step on the host (use bf16)");
  }
  if (lora_dropout > 0) refuse(config, "lora.dropout draws its masks on the host for every row (set lora.dropout: 0)");
  if (run.gradient_checkpointing && run.checkpointing.policy == memory::Policy::offload) {
    refuse(config, "checkpointing.policy offload copies block inputs to pinned host buffers allocated as the step "
                   "runs (use full, every_k, sqrt or selective)");
  }
  if (!train::adamw_uses_fused_kernel(training.adamw, torch::kFloat, torch::Device(torch::kCUDA))) {
    refuse(config, "the optimizer is not LibTorch's fused kernel (optimizer.state_dtype fp32 and optimizer.fused "
                   "auto or true)");
  }
}

void check_cuda_graph_run(const config::Config& config, const models::LlamaForCausalLM& model,
                          const train::AdamW& optimizer, bool distributed) {
  if (distributed) refuse(config, "the run has several processes (one process only, for now)");
  if (model->config().attn_logit_softcapping > 0) {
    refuse(config, "soft-capped attention (attn_logit_softcapping) runs tune's own core, which reads its mask on "
                   "the host");
  }
  if (!optimizer.can_step_on_device()) {
    refuse(config, "the optimizer does not take the fused kernel for every trained parameter (fp32 parameters, "
                   "optimizer.state_dtype fp32, optimizer.fused auto or true)");
  }
}

SftGraphStep::SftGraphStep(models::LlamaForCausalLM& model, train::AdamW& optimizer, std::vector<torch::Tensor> trained,
                           const RunSettings& run, const TrainingSettings& training, bool chunked_loss,
                           int64_t max_length, torch::Device device, bool capture)
    : model_(model),
      optimizer_(optimizer),
      trained_(std::move(trained)),
      precision_(run.mixed_precision),
      clip_grad_norm_(training.clip_grad_norm),
      chunked_loss_(chunked_loss),
      device_(device) {
  if (capture) {
    graph_ = std::make_unique<train::CudaGraphStep>([this] { return step(); }, [this] { optimizer_.zero_grad(); },
                                                    device, /*eager_steps=*/1);
  }
  const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (int64_t i = 0; i < training.gradient_accumulation_steps; ++i) {
    input_ids_.push_back(torch::zeros({training.batch_size, max_length}, ids));
    labels_.push_back(torch::zeros({training.batch_size, max_length}, ids));
    position_ids_.push_back(torch::zeros({training.batch_size, max_length}, ids));
    segment_ids_.push_back(torch::zeros({training.batch_size, max_length}, ids));
  }
  lr_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  loss_tokens_ = torch::ones({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
}

torch::Tensor SftGraphStep::step() {
  torch::Tensor step_loss;
  for (size_t i = 0; i < input_ids_.size(); ++i) {
    torch::Tensor loss;
    {
      precision::AutocastScope autocast(precision_, device_);
      models::AttentionInputs attention{position_ids_[i], segment_ids_[i]};
      attention.allow_plain_causal = false;  // the segments' check is a host read; one path for every batch
      loss = llama_loss_sum(model_, input_ids_[i], labels_[i], attention, chunked_loss_) / loss_tokens_;
    }
    loss.backward();
    const torch::Tensor detached = loss.detach().to(torch::kDouble);
    step_loss = step_loss.defined() ? step_loss + detached : detached;
  }
  const torch::Tensor norm = train::clip_grad_norm_on_device(trained_, clip_grad_norm_);
  // As finish_step: the update only where the loss and the gradients are finite (the fused kernel's found_inf).
  const torch::Tensor skip = torch::logical_not(torch::isfinite(step_loss) & torch::isfinite(norm)).to(torch::kFloat);
  optimizer_.step_on_device(lr_, skip);
  return torch::stack({step_loss, norm, skip.to(torch::kDouble)});
}

SftGraphStep::Outcome SftGraphStep::run(const std::vector<data::SftBatch>& micro_batches, int64_t loss_tokens,
                                        double lr) {
  if (micro_batches.size() != input_ids_.size()) {
    throw Error(fmt::format("cuda graph step: {} micro-batches, the step was built for {}", micro_batches.size(),
                            input_ids_.size()));
  }
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const data::SftBatch& batch = micro_batches[i];
    if (batch.input_ids.sizes() != input_ids_[i].sizes()) {
      throw Error(fmt::format("cuda graph step: a batch of shape [{}], the step was built for [{}] (the loader's "
                              "fixed_shape)", fmt::join(batch.input_ids.sizes(), ", "),
                              fmt::join(input_ids_[i].sizes(), ", ")));
    }
    // Ordered on the current stream after the previous step's replay, which read these tensors.
    input_ids_[i].copy_(batch.input_ids);
    labels_[i].copy_(batch.labels);
    position_ids_[i].copy_(batch.position_ids);
    segment_ids_[i].copy_(batch.segment_ids);
  }
  lr_.fill_(lr);
  loss_tokens_.fill_(static_cast<double>(std::max<int64_t>(1, loss_tokens)));
  torch::Tensor figures;
  if (graph_) {
    figures = graph_->run().to(torch::kCPU);
  } else {
    figures = step().to(torch::kCPU);
    optimizer_.zero_grad();
  }
  Outcome outcome;
  outcome.loss = figures[0].item<double>();
  outcome.grad_norm = figures[1].item<double>();
  outcome.applied = figures[2].item<double>() == 0.0;
  optimizer_.count_device_step(outcome.applied);
  return outcome;
}

}  // namespace tune::recipes::sft
