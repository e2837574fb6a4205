// Analytic activation-memory estimate for Latte blocks: a count of the tensors autograd saves in models/latte.cpp,
// models/latte_layers.cpp and nn/ (LibTorch 1.13, CPU or CUDA autocast).
#include "tune/recipes/latte/latte_memory_report.h"

#include <algorithm>

#include "tune/nn/attention_core.h"
#include "tune/nn/frame_attention.h"
#include "tune/nn/gelu_linear.h"
#include "tune/nn/linear.h"

namespace tune::recipes::latte {
namespace {

constexpr int64_t kFloat32 = 4;

struct Sizes {
  int64_t tokens;       // B * F * P: every block sees all of them, arranged per frame or per patch position
  int64_t frame_rows;   // B * F
  int64_t hidden, inner, heads, out_per_token, in_elements, c;
  bool low_precision;
  bool gemm_workspace;  // the fp32-accumulate CPU kernels' workspace (cpu_gemm_workspace) exists
  bool fused_attention;
  bool recomputing_attention;  // tune's core, recomputing its probabilities in backward
  bool fused_softmax_backward;  // the recomputing core's backward: 8 bytes per score, not 12
  bool recomputing_gelu;  // fc2 keeps GELU's input alone, recomputing its output in backward (nn::run_gelu_linear)
  bool keeping_gelu;      // fc2 keeps GELU's output, dropped in backward before GELU's input gradient (a recompute)
  bool recasting_linears;  // qkv, proj, fc1 and adaLN keep their fp32 weights, not copies (nn::linear)
  bool frozen;  // infer --grad (LatteActivationShape::frozen)
  bool frame_attention;  // the temporal blocks' attention is nn::frame_attention
};

Sizes sizes_of(const models::LatteConfig& config, const LatteActivationShape& shape) {
  Sizes s{};
  s.frame_rows = shape.batch * config.num_frames;
  s.tokens = s.frame_rows * config.num_patches();
  s.hidden = config.hidden_size;
  s.inner = config.mlp_hidden_size();
  s.heads = config.num_heads;
  s.out_per_token = config.patch_size * config.patch_size * config.out_channels();
  s.in_elements = s.frame_rows * config.in_channels * config.input_size * config.input_size;
  s.c = shape.compute_bytes;
  s.low_precision = shape.compute_bytes < kFloat32;
  s.gemm_workspace = s.low_precision && shape.fp32_accumulate_products;
  s.fused_attention = shape.attention_core == nn::AttentionCoreForm::fused;
  s.recomputing_attention = shape.attention_core == nn::AttentionCoreForm::recomputing;
  s.fused_softmax_backward = shape.fused_softmax_backward;
  s.frozen = shape.frozen;
  s.frame_attention = shape.cpu_frame_attention && config.num_frames <= nn::kFrameAttentionMaxFrames;
  s.recomputing_gelu = nn::gelu_linear_recomputes(shape.kept_until_backward, !shape.frozen);
  s.keeping_gelu = nn::gelu_linear_keeps(true, shape.kept_until_backward, !shape.frozen);
  s.recasting_linears = nn::linear_recasts_weight(s.low_precision, shape.kept_until_backward, !shape.frozen);
  return s;
}

// One block attending over sequences of `length` tokens (patches of a frame, or frames of a patch position),
// `sequences` of them, modulated from `conditions` rows of conditioning (a sample's: models::LatteBlockImpl repeats
// the modulation over a sample's frames, not the conditioning).
// `over_frames`: a temporal block under nn::frame_attention, whose core keeps no probabilities (the projection's
// output stands for q, k and v) and whose backward writes q's, k's and v's gradients into one tensor of that size.
BlockFootprint block_footprint(const Sizes& s, int64_t sequences, int64_t conditions, int64_t length, bool selective,
                               bool over_frames = false) {
  const int64_t td = s.tokens * s.hidden;
  const int64_t scores = sequences * s.heads * length * length;
  BlockFootprint block;
  // fp32: the block input kept by the first modulated LayerNorm (the stack's state, which both kinds of block take
  // in one layout) and, under selective only, the residual after attention (the second norm region's input):
  // otherwise the gated residual and the second norm are one node that recomputes that sum in backward
  // (nn::gated_residual_modulated_layer_norm).
  // The modulated norms keep no normalised copy (per-row statistics only, negligible).
  const int64_t residual_kept = selective ? td * kFloat32 : 0;
  int64_t saved = td * kFloat32 + residual_kept;
  // Compute dtype: the qkv input copy, q (scaled), k and v as the attention matmuls keep them, the context for
  // proj, proj's output (kept by the gate multiply), fc1's input copy, fc1's output (GELU's input), GELU's output
  // (fc2's input, unless fc2 recomputes it) and fc2's output (kept by the gate multiply). Frozen weights keep no
  // matmul input (qkv's, proj's, fc1's, fc2's): q, k, v, GELU's input and proj's output (the gated residual's node
  // keeps it to recompute the sum) remain. fc2's output is counted too, although the gate multiply does not keep it
  // when the conditioning needs no gradient (infer --grad): without it the estimate read 0.87 of the measured
  // `infer --grad` peak (tests/cli/latte_t2v_tests.sh), so it stands for temporaries not itemised here.
  const int64_t mlp_activations = s.recomputing_gelu ? 1 : 2;  // [tokens, inner] tensors kept
  saved += s.frozen ? (5 * td + s.tokens * s.inner) * s.c : (8 * td + mlp_activations * s.tokens * s.inner) * s.c;
  // Attention probabilities (fp32, and the compute-dtype copy for the value matmul) unless recomputed (the
  // recomputing core keeps q, k and v, as the plain core's matmuls keep them). The fused
  // core keeps none: instead the qkv output whose views are its q, k and v (one more than the three the plain
  // core's matmuls keep, which is the scaled q), its output beside proj's copy, and an fp32 log-sum-exp per row.
  const int64_t probabilities =
      s.fused_attention || over_frames ? 0 : scores * (kFloat32 + (s.low_precision ? s.c : 0));
  if (!s.recomputing_attention) saved += probabilities;
  if (s.fused_attention && !over_frames) saved += td * s.c + sequences * s.heads * length * kFloat32;
  // adaLN: SiLU keeps the conditioning [conditions, D] (fp32), the linear its cast (for its weight's gradient); the
  // two shifts are free, the two gates and (outside selective's recomputed norms) the two scales (1 + scale),
  // [B * F, D] once repeated over a sample's frames (both kinds of block take the state's (b f) rows), are kept by
  // their multiplies.
  saved += conditions * s.hidden * (kFloat32 + (s.frozen ? 0 : s.c)) +
           s.frame_rows * s.hidden * (selective ? 2 : 4) * s.c;
  // Weight copies under autocast: qkv, proj, fc1, fc2 (unless it recomputes or keeps GELU: it keeps the fp32 weight
  // and casts it again in backward) and the adaLN linear; none where those keep their fp32 weights (nn::linear: a
  // plainly run block's trainable layers).
  if (s.low_precision && !s.recasting_linears) {
    const int64_t mlp_copies = s.recomputing_gelu || s.keeping_gelu ? 1 : 2;
    saved += (4 * s.hidden * s.hidden + mlp_copies * s.hidden * s.inner + 6 * s.hidden * s.hidden) * s.c;
  }
  block.saved = saved;

  // Backward runs the MLP branch first: everything saved, the fp32 gradient of the block's output, and the
  // gradients into fc2's and fc1's outputs ([tokens, inner] each) beside the fresh fc weight gradient (the
  // recomputing fc2 first rebuilds GELU's output for its weight gradient and frees it: no more than those two).
  // Selective's activation region, where fc2 does not recompute GELU itself, recomputes it there: a third. The
  // keeping fc2 (a block's recompute) frees GELU's output, counted in `saved`, before the gradient into it is made
  // and GELU's backward writes over that gradient: one. (Each form's count is one above the tensors it holds at once,
  // as measured: the products' transient copies.)
  const int64_t in_flight = td * kFloat32 + (s.frozen ? 0 : s.hidden * s.inner * kFloat32);
  // Under frozen weights and autocast, fc2's input gradient also holds the fp32-accumulate product's workspace
  // (training's estimate leaves that constant out: its other terms already overcount by more, measured 1.07-1.09).
  const int64_t workspace =
      s.frozen && s.gemm_workspace ? cpu_gemm_workspace(s.tokens, s.hidden, s.inner) : 0;
  const int64_t mlp_phase =
      saved + in_flight + (selective && !s.recomputing_gelu ? 3 : 2) * s.tokens * s.inner * s.c + workspace;
  // Then the attention core, the MLP branch freed (under selective the second LayerNorm's input and its recomputed
  // output; fc1/fc2 tensors and proj's input and output): the fp32 probabilities with their incoming and outgoing
  // fp32 gradients (12 bytes per score; the recomputing core rebuilds them in one chunk, no mask) instead of the 6
  // kept.
  const int64_t mlp_half = residual_kept + (selective ? td * kFloat32 : 0) +
                           (s.frozen ? 2 * td + s.tokens * s.inner : 3 * td + mlp_activations * s.tokens * s.inner) * s.c;
  // The fused core's backward instead: the gradients of q, k and v and the kernel's fp32 accumulator for dq.
  // The recomputing core's fused softmax backward (bf16 on the CPU): 4 compute-dtype score tensors at once instead.
  const int64_t per_score = s.recomputing_attention && s.fused_softmax_backward ? 4 * s.c : 3 * kFloat32;
  // The recomputing core works through chunks of sequences (nn::recompute_chunk_batch): a chunk's scores at once.
  const int64_t core_scores =
      s.recomputing_attention ? nn::recompute_chunk_batch(sequences, s.heads, length, length) * s.heads * length * length
                              : scores;
  const int64_t core_backward = over_frames         ? 3 * td * s.c
                                : s.fused_attention ? 3 * td * s.c + td * kFloat32
                                                    : per_score * core_scores;
  const int64_t attention_phase =
      saved - mlp_half - (s.recomputing_attention ? 0 : probabilities) + core_backward + in_flight + td * s.c;
  block.backward_peak = std::max(mlp_phase, attention_phase);
  return block;
}

// After the last block, at the end of forward (the loss runs inside the step's forward): the final state (kept by
// the final modulated LayerNorm through its view), the final linear's input copy, its output
// and unpatchified copy in the compute dtype, their fp32 cast, and the learned-variance diffusion loss
// (diffusion/gaussian_diffusion.cpp: posterior and model means and log-variances, the KL and the t = 0 decoder
// likelihood, all [B, F, C, H, W] fp32), which peaks at about 35 tensors the size of the clean input beyond the
// model's output: measured with the tracking allocator on a stand-in model (38.5 with a 4-tensor output, at batch
// 16 and 64 alike). The embedded tokens (fp32) are still referenced by the model's forward.
// infer --grad instead: no input copy for the frozen final linear, and the classifier-free combination's temporaries
// in place of the loss, about two more output-sized fp32 tensors (what the guidance step keeps while it
// differentiates is counted in alive_throughout).
int64_t head_peak(const Sizes& s) {
  const int64_t td = s.tokens * s.hidden;
  const int64_t outputs = s.tokens * s.out_per_token;
  int64_t bytes = td * kFloat32 + (s.frozen ? 0 : td * s.c);
  bytes += 2 * outputs * s.c + outputs * kFloat32;
  bytes += s.frozen ? 2 * outputs * kFloat32 : 35 * s.in_elements * kFloat32;
  bytes += td * kFloat32;  // tokens = x_embedder(x) + pos_embed, alive until forward returns
  return bytes;
}

// Built before the first block and freed at the end of backward. Training: the patch embedding's input copy
// (compute dtype) under autocast. infer --grad: the patch embedding's input as its convolution keeps it (fp32, or
// its cast) and what the guidance step holds while it differentiates: the predicted clean video, the posterior mean
// and variance and the squared frame differences' input, four fp32 tensors of the samples' size (half the model's
// rows under classifier-free guidance, the default; without it these are undercounted by half).
int64_t alive_throughout(const Sizes& s) {
  if (!s.frozen) return s.low_precision ? s.in_elements * s.c : 0;
  return s.in_elements * (s.low_precision ? s.c : kFloat32) + 4 * (s.in_elements / 2) * kFloat32;
}

}  // namespace

StackMemory latte_stack(const models::LatteConfig& config, const LatteActivationShape& shape, bool selective) {
  const Sizes s = sizes_of(config, shape);
  const int64_t patches = config.num_patches();
  StackMemory stack;
  for (int64_t i = 0; i < config.depth; ++i) {
    const bool spatial = i % 2 == 0;  // models::LatteImpl::block_kind
    stack.blocks.push_back(spatial ? block_footprint(s, s.frame_rows, shape.batch, patches, selective)
                                   : block_footprint(s, shape.batch * patches, shape.batch, config.num_frames,
                                                     selective, s.frame_attention));
  }
  // A checkpointed block keeps its input, the stack's fp32 state. Its recomputed output is freed before its
  // backward starts (memory/checkpoint), and since the blocks no longer rearrange the state no relayout copy of it or
  // of its gradient stands in: nothing counted for it (measured with the relayouts gone: the estimate read 0.87-0.91
  // of the checkpointed peaks with one output counted).
  stack.block_input = s.tokens * s.hidden * kFloat32;
  stack.block_output = 0;
  stack.head_peak = head_peak(s);
  stack.alive_throughout = alive_throughout(s);
  return stack;
}

StackPhases latte_activation_phases(const models::LatteConfig& config, LatteActivationShape shape,
                                    c10::DeviceType device, c10::ScalarType compute_dtype,
                                    const memory::CheckpointRunner& runner) {
  auto stack_of = [&](const LatteActivationShape& each, bool selective) {
    return latte_stack(config, each, selective);
  };
  return phases_with_attention_cores(shape, device, compute_dtype, runner, stack_of);
}

int64_t latte_activation_estimate(const models::LatteConfig& config, LatteActivationShape shape,
                                  c10::DeviceType device, c10::ScalarType compute_dtype,
                                  const memory::CheckpointRunner& runner) {
  return latte_activation_phases(config, shape, device, compute_dtype, runner).peak();
}

}  // namespace tune::recipes::latte
