// The matrix-product and attention shapes of one training (or inference) step of each model family: what the
// measured CPU kernel choice times (cpu_kernel_choice.h). Each projection once (layers repeat the same shapes).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "tune/models/latte_config.h"
#include "tune/models/llama_config.h"
#include "tune/recipes/cpu_kernel_choice.h"

namespace tune::recipes {

// A decoder step over batch x sequence tokens: q/k/v, output, gate/up, down and the LM head projections; causal
// self-attention with key/value heads repeated to the query heads.
CpuWorkload llama_workload(const models::LlamaConfig& config, int64_t batch, int64_t sequence, c10::ScalarType dtype,
                           bool training);

// A Latte step over batch clips: qkv, output, MLP projections over every token; spatial attention (each frame's
// patches) and temporal attention (each patch's frames), unmasked.
CpuWorkload latte_workload(const models::LatteConfig& config, int64_t batch, c10::ScalarType dtype, bool training);

}  // namespace tune::recipes
