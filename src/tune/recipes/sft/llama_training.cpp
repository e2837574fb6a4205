#include "tune/recipes/sft/llama_training.h"

#include "tune/train/linear_cross_entropy.h"
#include "tune/train/loss.h"

namespace tune::recipes::sft {

LlamaTraining prepare_llama_training(models::LlamaForCausalLM& model, const config::Config& config,
                                     const RunSettings& run) {
  LlamaTraining training;
  training.checkpointing = std::make_shared<memory::CheckpointRunner>(run.checkpointing, model->num_blocks());
  model->set_block_runner(training.checkpointing);
  model->train();
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    training.params.push_back({item.key(), item.value()});
    training.param_tensors.push_back(item.value());
  }
  training.parallel = llama_data_parallel(model, config, training.param_tensors);
  model->set_block_runner(training.parallel->block_runner(training.checkpointing));
  return training;
}

std::unique_ptr<DataParallel> llama_data_parallel(models::LlamaForCausalLM& model, const config::Config& config,
                                                  const std::vector<torch::Tensor>& trainable) {
  std::vector<torch::Tensor> model_tensors;
  for (const auto& tensor : model->parameters()) model_tensors.push_back(tensor);
  for (const auto& tensor : model->buffers()) model_tensors.push_back(tensor);
  ModelBlocks blocks{model->blocks(), {}, {models::LlamaForCausalLMImpl::block_type()}, {}};
  blocks.types.assign(blocks.modules.size(), models::LlamaForCausalLMImpl::block_type());
  for (const auto& item : model->named_parameters()) blocks.named_parameters.emplace_back(item.key(), item.value());
  // QLoRA: the NF4 bytes and block statistics are sharded with their block like any frozen weight (the code books,
  // 16 and 256 floats, stay whole).
  for (const auto& item : model->named_buffers()) {
    const std::string& name = item.key();
    const bool nf4_data = name.size() > 11 && (name.ends_with(".nf4_packed") || name.ends_with(".nf4_absmax") ||
                                                name.ends_with(".nf4_nested_absmax"));
    if (nf4_data && item.value().numel() > 0) blocks.named_parameters.emplace_back(name, item.value());
  }
  return std::make_unique<DataParallel>(config, model_tensors, trainable, &blocks);
}

torch::Tensor llama_loss_sum(models::LlamaForCausalLM& model, const torch::Tensor& input_ids,
                             const torch::Tensor& labels, const models::AttentionInputs& attention, bool chunked_loss) {
  if (chunked_loss) {
    return train::causal_lm_linear_loss_sum(model->forward_hidden(input_ids, attention), model->output_weight(), labels,
                                            /*chunk_rows=*/0, model->output_softcap());
  }
  return train::causal_lm_loss_sum(model->forward(input_ids, attention), labels);
}

std::unique_ptr<precision::DynamicLossScaler> make_loss_scaler(const RunSettings& run) {
  if (run.mixed_precision != precision::MixedPrecision::fp16) return nullptr;
  return std::make_unique<precision::DynamicLossScaler>(run.loss_scale);
}

void save_loss_scaler(const precision::DynamicLossScaler* scaler, TrainerState& state) {
  if (scaler == nullptr) return;
  state.loss_scale = scaler->current_scale();
  state.loss_scale_clean_steps = scaler->clean_steps();
  state.skipped_steps = scaler->skipped_steps();
}

void restore_loss_scaler(precision::DynamicLossScaler* scaler, const TrainerState& state) {
  if (scaler != nullptr && state.loss_scale > 0) {
    scaler->restore(state.loss_scale, state.loss_scale_clean_steps, state.skipped_steps);
  }
}

}  // namespace tune::recipes::sft
