// Peak memory of an SFT step, term by term (peak_prediction.h).
#include "tune/recipes/sft/peak_prediction.h"

#include <algorithm>

#include "tune/nn/attention_core.h"
#include "tune/recipes/activation_estimate.h"
#include "tune/recipes/sft/memory_report.h"
#include "tune/recipes/sft/parameter_bytes.h"
#include "tune/recipes/sft/step_flops.h"
#include "tune/train/adamw.h"
#include "tune/train/sequence_logps.h"

namespace tune::recipes::sft {
namespace {

// The device and the matmuls' dtype, for the attention cores the run will take (nn::attention_core_form).
c10::DeviceType device_of(const SftPlanInputs& inputs) {
  return inputs.cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
}
c10::ScalarType compute_dtype_of(const SftPlanInputs& inputs) {
  return !inputs.low_precision ? c10::kFloat : inputs.fp16 ? c10::kHalf : c10::kBFloat16;
}

// full_shard (distributed/fully_sharded.h): what lives across steps is 1/N (flat shards, padding ignored); during
// forward and backward a process also holds the rest of the model (embeddings, head, final norm) gathered and its
// full gradients until backward ends, and at most two decoder layers gathered (a block gathered for its backward
// while the one after it completes) with their full gradients (one accumulating, one in its reduce-scatter). No
// ddp buckets. The optimizer update's temporaries are those of one flat shard's chunk.
void shard_fully(PeakBreakdown& peak, const SftPlanInputs& inputs, const ParameterCounts& counts, int64_t activations,
                 int processes, int64_t batch_tensors, int64_t tied_lookup_gradient) {
  const int64_t layers = std::max<int64_t>(1, inputs.model.num_hidden_layers);
  const int64_t head_elements = inputs.model.vocab_size * inputs.model.hidden_size *
                                    (inputs.model.tie_word_embeddings ? 1 : 2) + inputs.model.hidden_size;
  const double bytes_per_element = static_cast<double>(peak.parameters) / static_cast<double>(std::max<int64_t>(1, counts.total));
  const auto rest_bytes = static_cast<int64_t>(static_cast<double>(head_elements) * bytes_per_element);
  const int64_t layer_bytes = (peak.parameters - rest_bytes) / layers;
  const int64_t rest_trainable = std::max<int64_t>(0, counts.trainable - layers * counts.trainable_per_layer);
  peak.parameters /= processes;
  peak.gradients /= processes;
  peak.optimizer_state /= processes;
  peak.other = batch_tensors;
  const int64_t gathered = rest_bytes - rest_bytes / processes + 2 * layer_bytes;
  const int64_t full_gradients = (rest_trainable + 2 * counts.trainable_per_layer) * 4 + tied_lookup_gradient;
  peak.step = activations + gathered + full_gradients + peak.gradients + peak.other;
}

}  // namespace

memory::CheckpointOptions checkpoint_options(const PlanSetting& setting) {
  memory::CheckpointOptions options;
  options.policy = setting.checkpointing == "off" ? memory::Policy::off : memory::parse_policy(setting.checkpointing);
  options.k = std::max<int64_t>(1, setting.k > 0 ? setting.k : 2);
  return options;
}

PeakBreakdown predict_peak(const SftPlanInputs& inputs, const PlanSetting& setting) {
  const bool frozen_bf16 = setting.param_dtype == "bf16" && inputs.lora.lora.rank > 0;
  const ParameterCounts counts = count_parameters(inputs.model, inputs.lora);
  const ResidentBytes resident = resident_bytes(counts, frozen_bf16, inputs.optimizer_state_bf16);
  PeakBreakdown peak;
  peak.parameters = resident.parameters;
  peak.gradients = resident.gradients;
  peak.optimizer_state = resident.optimizer_state;
  if (inputs.shard_optimizer_state && setting.processes > 1 && counts.trainable > 0) {
    // shard_grad_op: contiguous shares balanced by bytes (distributed/parameter_partition), each within one
    // parameter of an even split; counted as the even split plus the largest parameter's state, an upper bound.
    const int64_t per_element = resident.optimizer_state / counts.trainable;
    peak.optimizer_state = std::min(resident.optimizer_state, resident.optimizer_state / setting.processes +
                                                                  counts.largest_trainable * per_element);
  }

  // Rows per micro-batch: a preference pair is two (chosen and rejected in one forward).
  const int64_t rows = setting.batch_size * (inputs.pairs.enabled ? 2 : 1);
  ActivationShape shape{rows, inputs.sequence, inputs.low_precision ? 2 : 4};
  shape.mask_batch = rows;  // SFT rows carry segment ids: one mask per row (as sft_train.cpp)
  if (inputs.pairs.enabled) {
    shape.head_chunk_rows = train::sequence_logps_chunk_rows(rows * inputs.sequence, inputs.model.vocab_size,
                                                             inputs.cuda, inputs.lora.lora.rank == 0);
  }
  shape.lora = inputs.lora;
  shape.base_weights_in_compute_dtype = frozen_bf16;
  shape.bf16_residual = frozen_bf16 && inputs.low_precision && !inputs.fp16;
  const memory::CheckpointRunner runner(checkpoint_options(setting), inputs.model.num_hidden_layers);
  RunnerStacks stacks = llama_stacks(inputs.model, shape, device_of(inputs), compute_dtype_of(inputs));
  StackMemory& plain = stacks.plain;
  StackMemory& selective = stacks.selective;
  const StackPhases phases = phases_for_runner(plain, selective, runner);
  peak.activations = phases.peak();

  // Batch tensors: input_ids, labels, position_ids and segment_ids, int64 [rows, T]. The CPU loader holds a step's
  // global micro-batches at once (every rank's rows: sft_train.cpp fetches them before the first forward) and a
  // rank slices a copy of its share; on CUDA only the micro-batch copied to the device counts.
  const int64_t row_bytes = 4 * 8 * inputs.sequence;
  if (inputs.cuda) {
    peak.other = row_bytes * rows;
  } else {
    peak.other = row_bytes * rows * setting.processes * setting.accumulation;
    if (setting.processes > 1) peak.other += row_bytes * rows;
  }
  // QLoRA: one NF4 weight dequantised at a time (forward, and again in backward): the int32 byte indices (2 bytes
  // per element), the float32 code values and their scaled copy (4 + 4) and the result in the compute dtype.
  if (counts.nf4 > 0) peak.other += counts.largest_nf4 * (2 + 4 + 4 + (inputs.low_precision ? 2 : 4));
  const int64_t batch_tensors = peak.other;
  // ddp, shard_grad_op: the reducer flattens each bucket's gradients into a copy in the reduce dtype, at most two
  // buckets in flight (distributed/gradient_reducer.cpp); a bf16 bucket is cast from an fp32 concatenation.
  if (setting.processes > 1) {
    peak.other += std::min(counts.trainable * (inputs.reduce_bf16 ? 2 : 4), 2 * inputs.bucket_bytes);
    if (inputs.reduce_bf16) peak.other += std::min(inputs.bucket_bytes, counts.trainable * 4);
  }
  // Gradients during the step. With accumulation, the earlier micro-batches' are all there from the first forward
  // on. Without it they are dropped after each update (zero_grad sets them to none) and arrive during backward: the
  // head's first (made by the head's backward, beside every block's activations), then block by block as each
  // block's activations are freed (StackMemory::gradient_per_block), an untied input embedding's last.
  // A tied embedding, fully trained, gets its gradient twice: the output head's early in backward, then the input
  // lookup's at the very end, a dense fp32 [vocab, hidden] tensor added into the first. With every other gradient
  // present, that moment (measured on the 1B model at 1024 tokens: all gradients + 1 GiB) can be the step's peak.
  const bool full_training = inputs.lora.lora.rank == 0;
  const int64_t embedding_gradient = inputs.model.vocab_size * inputs.model.hidden_size * 4;
  const int64_t tied_lookup_gradient = full_training && inputs.model.tie_word_embeddings ? embedding_gradient : 0;
  if (setting.accumulation > 1) {
    peak.step = std::max(phases.peak(), tied_lookup_gradient) + peak.gradients + peak.other;
  } else {
    plain.gradient_per_block = selective.gradient_per_block = counts.trainable_per_layer * 4;
    const StackPhases arriving = phases_for_runner(plain, selective, runner);
    const int64_t head_gradients = counts.trainable_head * 4;
    peak.step = std::max({phases.forward_end + head_gradients, arriving.backward + head_gradients,
                          peak.gradients + tied_lookup_gradient}) +
                peak.other;
  }
  // AdamW's update (train/adamw.cpp): fp32 temporaries of one chunk of the largest trainable tensor; activations
  // are freed by then.
  train::AdamWOptions adamw;
  adamw.state_dtype = inputs.optimizer_state_bf16 ? torch::kBFloat16 : torch::kFloat;
  peak.optimizer_step = train::adamw_step_temporary_bytes(adamw, counts.largest_trainable, false);
  if (inputs.full_shard && setting.processes > 1) {
    shard_fully(peak, inputs, counts, phases.peak(), setting.processes, batch_tensors, tied_lookup_gradient);
  }
  // dpo, full fine-tuning: the frozen reference copy, whole on every process, or under full_shard 1/N of it (its
  // units gathered only during its own forward). Its forward runs without gradients before the policy's and keeps
  // nothing, so its transients never meet the policy's activations.
  if (inputs.pairs.enabled && full_training) {
    const int64_t copy = counts.total * inputs.pairs.reference_copy_bytes_per_parameter;
    peak.parameters += inputs.full_shard && setting.processes > 1 ? copy / setting.processes : copy;
  }
  return peak;
}

double predict_relative_time(const SftPlanInputs& inputs, const PlanSetting& setting) {
  const memory::CheckpointRunner runner(checkpoint_options(setting), inputs.model.num_hidden_layers);
  const bool softcapped = inputs.model.attn_logit_softcapping > 0;
  auto form = [&](bool kept_until_backward, bool selective) {
    return nn::attention_core_form(device_of(inputs), compute_dtype_of(inputs), kept_until_backward, selective,
                                   softcapped);
  };
  const StepFlops flops =
      step_flops(inputs.model, inputs.lora, inputs.sequence, runner, {form(true, false), form(false, false), form(true, true)});
  // dpo: the reference's forward (without gradients) is part of every step, whatever the policy.
  const double reference = inputs.pairs.enabled && inputs.pairs.reference_forward ? flops.forward : 0.0;
  return (flops.forward + flops.backward + flops.recompute + reference) / (flops.forward + flops.backward + reference);
}

}  // namespace tune::recipes::sft
