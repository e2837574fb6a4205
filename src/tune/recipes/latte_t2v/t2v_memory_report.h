// Where the text-to-video Latte's activation memory goes in a training step (or in one step of infer --grad, whose
// guidance differentiates the model's prediction with respect to the latents): per-block footprints for the stack
// estimate of recipes/activation_estimate.h, as recipes/latte/latte_memory_report does for the class-conditional
// Latte. Spatial blocks attend within a frame's patches and to the caption, temporal blocks over a patch position's
// frames, so the two kinds of block keep different sets. Checked against the tracking allocator by
// tests/recipes/test_t2v_memory.cpp.
#pragma once

#include <cstdint>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "tune/memory/checkpoint.h"
#include "tune/models/latte_t2v_config.h"
#include "tune/nn/attention_core.h"
#include "tune/recipes/activation_estimate.h"

namespace tune::recipes::latte_t2v {

struct T2VActivationShape {
  int64_t batch = 1;          // samples (under classifier-free guidance at inference: 2 x prompts)
  int64_t frames = 16;        // latent frames F
  int64_t latent_height = 64, latent_width = 64;
  int64_t text_tokens = 120;  // L, the caption length the cross-attention sees
  int64_t compute_bytes = 2;  // 2 under bf16/fp16 autocast, 4 otherwise
  bool training_loss = true;  // the learned-variance diffusion loss on the output (training); false: infer --grad
  nn::AttentionCoreForm attention_core = nn::AttentionCoreForm::plain;  // set by t2v_activation_estimate
  // Whether the blocks' graphs live until backward (plainly run or selective's blocks): a trained net.2 then
  // recomputes GELU (nn::gelu_linear_recomputes). Set per kind of block by stacks_with_attention_cores.
  bool kept_until_backward = true;
  // Whether bf16/fp16 products take tune's fp32-accumulate CPU kernels (precision/cpu_gemm.h), whose fp32 workspace
  // the estimate then counts: set from the run's device and CPU kernel choice by stacks_with_attention_cores (CUDA
  // and LibTorch's native CPU kernels have none).
  bool fp32_accumulate_products = true;
  // The recomputing core's backward fuses its softmax's (nn::recomputing_core_fuses_softmax_backward; set with it).
  bool fused_softmax_backward = false;
};

// The counts follow what autograd saves in models/latte_t2v.cpp, latte_t2v_layers.cpp and nn/ (LibTorch 2.x), for
// fp32 master weights (under autocast each matmul weight gets a compute-dtype copy; infer's frozen_weights_bf16 has
// none, a weight-sized overcount) and no LoRA adapters (an adapter's lora_A keeps its layer's input as the weight
// gradient does, so LoRA training on every target keeps about what full training keeps, plus rank-sized tensors).
// training_loss: the transformer's weights train and the learned-variance diffusion loss runs on the output.
// Otherwise infer --grad: the weights are frozen (so no matmul keeps its input for a weight gradient) and the head
// is what the DDIM guidance step differentiates (video_guidance's objective on the predicted clean latents).
// `selective`: blocks as selective checkpointing runs them (the modulated norms keep only their inputs; the
// feed-forward keeps what a plain block keeps); the attention cores as
// shape.attention_core says.
StackMemory latte_t2v_stack(const models::LatteT2VConfig& config, const T2VActivationShape& shape, bool selective);

// The estimate for the policy `runner` applies (estimate_for_runner), with the attention cores
// nn::run_attention_core takes on `device` in `compute_dtype` (stacks_with_attention_cores: shape.attention_core is
// set there).
int64_t t2v_activation_estimate(const models::LatteT2VConfig& config, T2VActivationShape shape,
                                c10::DeviceType device, c10::ScalarType compute_dtype,
                                const memory::CheckpointRunner& runner);
// Its two phases (the end of forward, the worst block backward): `tune plan` adds the parameter gradients to the
// backward phase alone.
StackPhases t2v_activation_phases(const models::LatteT2VConfig& config, T2VActivationShape shape,
                                  c10::DeviceType device, c10::ScalarType compute_dtype,
                                  const memory::CheckpointRunner& runner);

}  // namespace tune::recipes::latte_t2v
