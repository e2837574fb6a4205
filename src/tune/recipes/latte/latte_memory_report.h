// Where a Latte training step's activation memory goes, announced before the first step as the SFT recipe does:
// per-block footprints (spatial and temporal blocks attend over different sequences) for the stack estimate of
// recipes/activation_estimate.h. Checked against the tracking allocator by tests/recipes/test_latte_memory.cpp.
#pragma once

#include <cstdint>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "tune/memory/checkpoint.h"
#include "tune/models/latte_config.h"
#include "tune/nn/attention_core.h"
#include "tune/recipes/activation_estimate.h"

namespace tune::recipes::latte {

struct LatteActivationShape {
  int64_t batch = 1;
  int64_t compute_bytes = 2;  // bytes per element of matmul outputs (2 under bf16/fp16 autocast, 4 otherwise)
  // The attention core's form (nn::attention_core_form; latte_activation_estimate sets it for each kind of block).
  nn::AttentionCoreForm attention_core = nn::AttentionCoreForm::plain;
  // infer --grad: the weights are frozen (a matmul keeps no input for a weight gradient, and no weight gradient is
  // made) and the sampler's guidance objective on the output replaces the training loss. `batch` then counts the
  // model's rows: 2 x samples under classifier-free guidance.
  bool frozen = false;
  // Whether the blocks' graphs live until backward (plainly run or selective's blocks), not only through a
  // checkpointed block's recompute: their fc2 then recomputes GELU (nn::gelu_linear_recomputes). Set per kind of
  // block by stacks_with_attention_cores (recipes/activation_estimate.h).
  bool kept_until_backward = true;
  // Whether bf16/fp16 products take tune's fp32-accumulate CPU kernels, whose workspace the estimate then counts
  // (products_accumulate_in_fp32: stacks_with_attention_cores sets it from the device and the run's kernel choice).
  bool fp32_accumulate_products = true;
  // The recomputing core's backward fuses its softmax's (nn::recomputing_core_fuses_softmax_backward; set with it).
  bool fused_softmax_backward = false;
  // The temporal blocks attend over the frames through nn::frame_attention (the CPU, up to its frame limit), not the
  // core above: set by stacks_with_attention_cores.
  bool cpu_frame_attention = false;
};

// The counts follow what autograd saves in models/latte.cpp, latte_layers.cpp and nn/ (LibTorch 1.13), for fp32
// master weights (under autocast each matmul weight gets a compute-dtype copy) and the learned-variance diffusion
// loss on the model's output. `selective`: blocks as selective checkpointing runs them (the modulated norms keep
// only their inputs; the MLP keeps what a plain block keeps); the attention core as
// shape.attention_core says.
StackMemory latte_stack(const models::LatteConfig& config, const LatteActivationShape& shape, bool selective);

// The activation estimate for the policy `runner` applies, with the attention cores nn::run_attention_core takes on
// `device` for `compute_dtype` (plainly run and recomputing blocks): what latte_train's and latte_infer's memory
// plans print and `tune plan` counts.
int64_t latte_activation_estimate(const models::LatteConfig& config, LatteActivationShape shape,
                                  c10::DeviceType device, c10::ScalarType compute_dtype,
                                  const memory::CheckpointRunner& runner);
// Its two phases (the end of forward, the worst block backward): `tune plan` adds the parameter gradients to the
// backward phase alone.
StackPhases latte_activation_phases(const models::LatteConfig& config, LatteActivationShape shape,
                                    c10::DeviceType device, c10::ScalarType compute_dtype,
                                    const memory::CheckpointRunner& runner);

}  // namespace tune::recipes::latte
