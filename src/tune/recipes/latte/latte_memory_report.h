// Where a Latte training step's activation memory goes, announced before the first step as the SFT recipe does:
// per-block footprints (spatial and temporal blocks attend over different sequences) for the stack estimate of
// recipes/activation_estimate.h. Checked against the tracking allocator by tests/recipes/test_latte_memory.cpp.
#pragma once

#include <cstdint>

#include "tune/models/latte_config.h"
#include "tune/recipes/activation_estimate.h"

namespace tune::recipes::latte {

struct LatteActivationShape {
  int64_t batch = 1;
  int64_t compute_bytes = 2;  // bytes per element of matmul outputs (2 under bf16/fp16 autocast, 4 otherwise)
  bool fused_attention = false;  // nn::uses_fused_attention: the attention core is scaled_dot_product_attention
};

// The counts follow what autograd saves in models/latte.cpp, latte_layers.cpp and nn/ (LibTorch 1.13), for fp32
// master weights (under autocast each matmul weight gets a compute-dtype copy) and the learned-variance diffusion
// loss on the model's output. `selective`: blocks as selective checkpointing runs them (the attention core keeps
// q, k, v and recomputes its probabilities; the modulated norms keep only their inputs; GELU keeps what a plain
// block keeps, its output being fc2's input).
StackMemory latte_stack(const models::LatteConfig& config, const LatteActivationShape& shape, bool selective);

}  // namespace tune::recipes::latte
