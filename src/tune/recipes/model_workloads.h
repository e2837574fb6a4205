// The matrix-product and attention shapes of one training (or inference) step of each model family: what the
// measured CPU kernel choice times (cpu_kernel_choice.h). Each projection once (layers repeat the same shapes).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tune/models/latte_config.h"
#include "tune/models/latte_t2v_config.h"
#include "tune/models/llama_config.h"
#include "tune/models/sana_config.h"
#include "tune/recipes/cpu_kernel_choice.h"

namespace tune::recipes {

// A decoder step over batch x sequence tokens: q/k/v, output, gate/up, down and the LM head projections; causal
// self-attention with key/value heads repeated to the query heads.
CpuWorkload llama_workload(const models::LlamaConfig& config, int64_t batch, int64_t sequence, c10::ScalarType dtype,
                           bool training);

// QLoRA: the products of `workload`'s tokens with the NF4 projections `nf4_modules` names (q_proj, ..., down_proj)
// added as its nf4_projections.
void add_nf4_projections(CpuWorkload& workload, const models::LlamaConfig& config, int64_t tokens,
                         const std::vector<std::string>& nf4_modules);

// A Latte step over batch clips: qkv, output, MLP projections over every token; spatial attention (each frame's
// patches) and temporal attention (each patch's frames), unmasked.
CpuWorkload latte_workload(const models::LatteConfig& config, int64_t batch, c10::ScalarType dtype, bool training);

// A text-to-video Latte step over batch clips of `frames` latent frames (latent_h x latent_w) with text_tokens
// caption tokens: q/k/v/out, cross-attention query and feed-forward projections over every token; spatial,
// temporal and cross attention (each frame's patches against the caption).
CpuWorkload latte_t2v_workload(const models::LatteT2VConfig& config, int64_t batch, int64_t frames, int64_t latent_h,
                               int64_t latent_w, int64_t text_tokens, c10::ScalarType dtype, bool training);

// A Sana step over batch images of latent_h x latent_w tokens (patch 1) with text_tokens caption tokens: the
// projections of the linear self-attention and the cross-attention over every token (GLUMBConv's 1x1 convolutions are
// LibTorch's convolution kernels, not timed here); the cross-attention (an image's tokens against the caption).
CpuWorkload sana_workload(const models::SanaConfig& config, int64_t batch, int64_t latent_h, int64_t latent_w,
                          int64_t text_tokens, c10::ScalarType dtype, bool training);

}  // namespace tune::recipes
