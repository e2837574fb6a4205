// Where training memory goes, announced before the first step: parameters, gradients, optimizer state and an
// analytic estimate of activations for the checkpointing policy in use. The measured peak is logged per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/models/llama.h"
#include "tune/recipes/activation_estimate.h"
#include "tune/models/llama_config.h"
#include "tune/nn/attention_core.h"

namespace tune::recipes::sft {

struct ActivationShape {
  int64_t batch = 1;
  int64_t sequence = 512;
  int64_t compute_bytes = 2;   // bytes per element of matmul outputs (2 under bf16/fp16 autocast, 4 otherwise)
  int64_t mask_batch = 1;      // sequences the attention mask is built for: batch when rows carry segment ids
                               // (SFT: packing and padding), 1 for a plain causal mask
  models::LlamaLoraOptions lora;  // rank 0: no adapters (full fine-tuning)
  // The residual stream is bf16: a frozen bf16 embedding (LoRA with param_dtype bf16) under bf16 autocast, so every
  // block input and norm input is bf16 and the norms' outputs are too (the projections reading one share it).
  bool bf16_residual = false;
  bool base_weights_in_compute_dtype = false;  // param_dtype: bf16 (frozen base stored in bf16): autocast makes no
                                               // weight copies
  // The head: 0, the summed next-token loss over whole fp32 logits (sft); > 0, per-sequence log-probs through the
  // output layer in chunks of this many positions (train/sequence_logps: dpo), the logits never whole.
  int64_t head_chunk_rows = 0;
  // The attention core's form (nn::attention_core_form): fused, LibTorch's kernel, which keeps q, k, v, the output
  // and a log-sum-exp per row (CUDA; the CPU where it is the faster one); recomputing, tune's core keeping q, k, v
  // (its other layers under gradients); plain, tune's core keeping the probabilities (a checkpointed layer's
  // recompute). llama_stacks sets it for each.
  nn::AttentionCoreForm attention_core = nn::AttentionCoreForm::plain;
  // The recomputing core's backward fuses its softmax's (nn::recomputing_core_fuses_softmax_backward; set with it).
  bool fused_softmax_backward = false;
  // The norms of fp32 inputs take nn/rms_norm_cpu's kernels (the CPU, unless TUNE_CPU_NORM=libtorch; set with the
  // attention core), which keep no normalised tensor.
  bool cpu_rms_norm_kernel = false;
  // The SwiGLU product of bf16 projections takes nn/swiglu_cpu's kernel (the CPU under bf16 autocast, unless
  // TUNE_CPU_SWIGLU=libtorch), which keeps gate and up but not silu's output.
  bool cpu_swiglu_kernel = false;
};

// What one decoder layer holds (recipes/activation_estimate.h).
using LayerFootprint = BlockFootprint;
// A layer run plainly (policies off, full, every_k, sqrt: a checkpointed layer's recompute rebuilds this), with the
// attention core in shape.attention_core's form.
LayerFootprint plain_layer_footprint(const models::LlamaConfig& config, const ActivationShape& shape);
// A layer under selective checkpointing.
LayerFootprint selective_layer_footprint(const models::LlamaConfig& config, const ActivationShape& shape);

// The model's stack for recipes/activation_estimate.h: every layer plain (`selective` false) or as selective
// checkpointing runs it, the mask alive throughout, the final norm, lm_head and loss as the head.
StackMemory llama_stack(const models::LlamaConfig& config, const ActivationShape& shape, bool selective);

// The stacks for phases_for_runner with the attention cores a run takes on `device` in `compute_dtype`
// (stacks_with_attention_cores; Gemma 2's soft-capped scores always take tune's own core). shape.attention_core is
// set there.
RunnerStacks llama_stacks(const models::LlamaConfig& config, const ActivationShape& shape, c10::DeviceType device,
                          c10::ScalarType compute_dtype);

// The estimates count what the step allocates on top of what lives across steps (parameters, their gradients,
// optimizer state): the tensors autograd saves in our Llama implementation (models/llama_layers.cpp, nn/), the
// low-precision weight copies autocast makes, and the largest transient working set. They assume fp32 weights
// (under autocast every matmul weight gets a compute-dtype copy) and no biases (they add little). With LoRA
// (shape.lora) they count what each adapter keeps (its input copy, LibTorch 1.13's CPU dropout noise, the rank-r
// output) and drop the base weights' gradients.

// Bytes one decoder layer keeps for backward when it is not checkpointed, its fp32 input included.
int64_t estimate_layer_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape);
// One block's working set: the most a plain layer holds during its backward (plain_layer_footprint().backward_peak).
// Policy full's floor is the block inputs plus this.
int64_t estimate_layer_working_set_bytes(const models::LlamaConfig& config, const ActivationShape& shape);

// The stack estimates themselves: recipes/activation_estimate.h on llama_stacks' stacks (estimate_for_runner for a
// runner, estimate_stack_bytes for a layout or last_blocks_checkpointed's upper bound from a count,
// estimate_segmented_stack_bytes for sqrt's segments).

}  // namespace tune::recipes::sft
