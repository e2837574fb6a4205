// Attention over a few frames at each token (a video model's temporal blocks), read straight from the qkv
// projection's output and written straight into the token rows the output projection reads: one pass each way.
//
// Why: a temporal block attends over F frames (8 at Latte-S/2, 16 at Latte-1) for each token of each sample and
// head. Through the general attention core that is a copy laying q, k and v out as [B*T*H, F, hd] batches, two batched
// products of tiny [F, hd] x [hd, F] matrices (thousands of them, each too small for a matrix kernel: 6 MFLOP in
// 1.2 ms at one thread on the AMX Xeon, where a [256, 64] x [64, 256] batch runs 800 MFLOP in 2.1 ms), the softmax
// and its casts, and a copy gathering the heads back into token rows; backward doubles all of it. Here each (sample,
// token, head) reads its F rows of q, k and v where the projection wrote them, computes its F x F scores and
// probabilities in fp32 in registers-sized buffers, and writes its context rows in place: no copies, no [B*T*H, F, F]
// tensors, and autograd keeps only the projection's output (what the general path keeps as its q, k, v copies).
#pragma once

#include <torch/types.h>

namespace tune::nn {

// Whether frame_attention takes `qkv` (laid out as below): a contiguous CPU tensor of fp32, float64, bf16 or fp16
// with at most kFrameAttentionMaxFrames frames, unless TUNE_CPU_FRAME_ATTENTION=off (the caller then takes the
// general attention core: for side-by-side benchmarks).
constexpr int64_t kFrameAttentionMaxFrames = 64;
bool frame_attention_applies(const torch::Tensor& qkv);
// Whether the kernel is on at all (not TUNE_CPU_FRAME_ATTENTION=off): the CPU kernel choice then times no temporal
// shapes, which it never runs (recipes/model_workloads).
bool frame_attention_enabled();

// qkv [B, F, T, 3 * H * hd]: a linear's output over tokens in (b f) t order, q, k and v each H heads of hd
// channels. Returns the context [B, F, T, H * hd] in qkv's dtype: for every sample b, token t and head h,
// softmax(q k^T * scale) v over the F frames, the scores, softmax and value sums in fp32 (float64 for a float64
// input) and the result rounded once. Differentiable in qkv (backward recomputes the probabilities, as the
// recomputing attention core does, and writes q's, k's and v's gradients into one tensor shaped as qkv); no double
// backward.
torch::Tensor frame_attention(const torch::Tensor& qkv, int64_t heads, double scale);

}  // namespace tune::nn
