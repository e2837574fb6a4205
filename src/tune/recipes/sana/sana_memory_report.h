// Where Sana's activation memory goes in a training step (flow matching: an MSE on the velocity) or in one step of
// infer --grad (the weights frozen, the guidance differentiating the prediction with respect to the latents):
// per-block footprints for the stack estimate of recipes/activation_estimate.h. Checked against the tracking
// allocator by tests/recipes/test_sana_memory.cpp.
#pragma once

#include <cstdint>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "tune/memory/checkpoint.h"
#include "tune/models/sana_config.h"
#include "tune/nn/attention_core.h"
#include "tune/recipes/activation_estimate.h"

namespace tune::recipes::sana {

struct SanaActivationShape {
  int64_t batch = 1;          // samples (under classifier-free guidance at inference: 2 x prompts)
  int64_t latent_height = 32, latent_width = 32;
  int64_t text_tokens = 300;  // L, the caption length the cross-attention sees
  int64_t compute_bytes = 2;  // 2 under bf16/fp16 autocast, 4 otherwise
  bool training_loss = true;  // the weights train and the flow-matching MSE runs on the output; false: infer --grad
  // The cross-attention's core: nn::attention_core_form(...) (sana_activation_estimate sets it).
  nn::AttentionCoreForm attention_core = nn::AttentionCoreForm::plain;
  // The recomputing core's backward fuses its softmax's (nn::recomputing_core_fuses_softmax_backward; set with it).
  bool fused_softmax_backward = false;
  // RMSNorms of fp32 inputs take nn/rms_norm_cpu's kernels (set with the attention core).
  bool cpu_rms_norm_kernel = false;
};

// The counts follow what autograd saves in models/sana.cpp, sana_layers.cpp, diffusers_layers.cpp and nn/ (LibTorch
// 2.x) for fp32 master weights without LoRA adapters (an adapter's lora_A keeps its layer's input as the weight
// gradient does: LoRA on every attention projection keeps about what full training keeps). `selective`: blocks as
// selective checkpointing runs them (the linear attention core and the modulated norms recompute, keeping their
// inputs); the softmax attention core as shape.attention_core says.
StackMemory sana_stack(const models::SanaConfig& config, const SanaActivationShape& shape, bool selective);

// The estimate for the policy `runner` applies, with the cross-attention core nn::run_attention_core takes on
// `device` in `compute_dtype` (shape.attention_core is set here).
int64_t sana_activation_estimate(const models::SanaConfig& config, SanaActivationShape shape, c10::DeviceType device,
                                 c10::ScalarType compute_dtype, const memory::CheckpointRunner& runner);
// Its two phases (the end of forward, the worst block backward): `tune plan` adds the parameter gradients to the
// backward phase alone.
StackPhases sana_activation_phases(const models::SanaConfig& config, SanaActivationShape shape, c10::DeviceType device,
                                   c10::ScalarType compute_dtype, const memory::CheckpointRunner& runner);

}  // namespace tune::recipes::sana
