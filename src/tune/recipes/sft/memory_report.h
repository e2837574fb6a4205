// Where training memory goes, announced before the first step: parameters, gradients, optimizer state and an
// analytic estimate of activations for the checkpointing policy in use. The measured peak is logged per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/models/llama.h"
#include "tune/recipes/activation_estimate.h"
#include "tune/models/llama_config.h"

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
  bool fused_attention = false;  // nn::uses_fused_attention: attention_core_fused (scaled_dot_product_attention)
                                 // for every policy, which keeps q, k, v, the output and a log-sum-exp per row, no
                                 // probabilities (CUDA; the CPU where LibTorch's kernel is the faster one)
};

// What one decoder layer holds (recipes/activation_estimate.h).
using LayerFootprint = BlockFootprint;
// A layer run plainly (policies off, full, every_k, sqrt: a checkpointed layer's recompute rebuilds this).
LayerFootprint plain_layer_footprint(const models::LlamaConfig& config, const ActivationShape& shape);
// A layer under selective checkpointing.
LayerFootprint selective_layer_footprint(const models::LlamaConfig& config, const ActivationShape& shape);

// The model's stack for recipes/activation_estimate.h: every layer plain (`selective` false) or as selective
// checkpointing runs it, the mask alive throughout, the final norm, lm_head and loss as the head.
StackMemory llama_stack(const models::LlamaConfig& config, const ActivationShape& shape, bool selective);

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

// Peak activation bytes of one forward + backward with the given layers checkpointed (one flag per layer). The
// peak is the larger of the end of forward (every layer's saved tensors plus the logits and loss) and the
// backward of some layer i (what layers before i keep, plus layer i's footprint, recomputed if checkpointed). The
// attention mask, alive throughout, is added to both.
int64_t estimate_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                  const std::vector<bool>& checkpointed);

// Same when only the number of checkpointed layers is known: an upper bound over where they sit, reached when
// the last layer is checkpointed (its recompute then runs while every plain layer still holds its activations).
// Exact for policy full; a policy that leaves plain layers after its last checkpointed one peaks lower.
int64_t estimate_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                  int64_t checkpointed_layers);

// sqrt policy: segments of `segment_size` layers checkpointed as one (only segment inputs kept in forward).
int64_t estimate_segmented_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                            int64_t segment_size);

// selective policy: every layer keeps its reduced saved set (selective_layer_footprint).
int64_t estimate_selective_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape);

}  // namespace tune::recipes::sft
