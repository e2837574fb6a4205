// What the LLM training commands (sft, dpo) share once the model is built: its trainable parameters, the
// checkpointing runner and the data-parallel wrapper put around them in the order they need, the fp16 loss scaler,
// and the loss scaler's part of a checkpoint.
#pragma once

#include <memory>
#include <vector>

#include "tune/config/config.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/precision/loss_scaler.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/train/adamw.h"

namespace tune::recipes::sft {

struct LlamaTraining {
  std::vector<train::NamedParameter> params;  // requires_grad parameters, by name
  std::vector<torch::Tensor> param_tensors;
  std::shared_ptr<memory::CheckpointRunner> checkpointing;
  std::unique_ptr<DataParallel> parallel;  // set as the model's block runner, wrapping `checkpointing`
};

// The model in training mode with run.checkpointing's runner, inside the data parallelism the config asks for
// (every parameter and buffer broadcast from rank 0, the trainable ones reduced; blocks for full_shard).
LlamaTraining prepare_llama_training(models::LlamaForCausalLM& model, const config::Config& config,
                                     const RunSettings& run);

// The data parallelism the config asks for around `model` (every parameter and buffer broadcast from rank 0,
// `trainable` reduced; its blocks wrapped under full_shard), not yet installed as its block runner. A frozen model
// (dpo's reference copy) passes no trainable tensors: under full_shard it is then held as flat shards too.
std::unique_ptr<DataParallel> llama_data_parallel(models::LlamaForCausalLM& model, const config::Config& config,
                                                  const std::vector<torch::Tensor>& trainable);

// The summed next-token loss of a batch (device tensors): lm_head + causal_lm_loss_sum, or with `chunked_loss`
// (training.chunked_loss) the loss fused with the output projection in chunks.
torch::Tensor llama_loss_sum(models::LlamaForCausalLM& model, const torch::Tensor& input_ids,
                             const torch::Tensor& labels, const models::AttentionInputs& attention, bool chunked_loss);

// fp16 needs loss scaling so small gradients survive; bf16 has fp32's exponent range and does not: null then.
std::unique_ptr<precision::DynamicLossScaler> make_loss_scaler(const RunSettings& run);
// The scaler's state into a checkpoint's TrainerState, and back (a state without one leaves the scaler fresh).
void save_loss_scaler(const precision::DynamicLossScaler* scaler, TrainerState& state);
void restore_loss_scaler(precision::DynamicLossScaler* scaler, const TrainerState& state);

}  // namespace tune::recipes::sft
