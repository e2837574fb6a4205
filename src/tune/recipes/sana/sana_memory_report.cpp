// Analytic activation-memory estimate for Sana's blocks: a count of the tensors autograd saves in models/sana.cpp,
// models/sana_layers.cpp, models/diffusers_layers.cpp and nn/ (LibTorch 2.x, CPU or CUDA autocast), in the shape of
// recipes/latte_t2v/t2v_memory_report.cpp. Where a backward's temporaries are summarised by a multiple of a tensor
// size, the multiple was fitted to the tracking allocator by tests/recipes/test_sana_memory.cpp.
#include "tune/recipes/sana/sana_memory_report.h"

#include <algorithm>
#include <vector>

namespace tune::recipes::sana {
namespace {

constexpr int64_t kFloat32 = 4;
constexpr int64_t kModulationRows = 6;  // time_embed's timestep6: shift, scale, gate for attention and FF

struct Sizes {
  int64_t batch, patches, tokens;  // tokens: B * N image tokens
  int64_t hidden, head_dim, cross_inner, cross_heads, ff_hidden, text, caption_channels, out_elements, in_elements;
  int64_t state;  // elements of the stack's state [B, N + 6 + L, D]
  int64_t c;
  bool low_precision, fused_attention, frozen, qk_norm;
  bool recomputing_attention;  // the cross-attention in tune's core, recomputing its probabilities in backward
  bool fused_softmax_backward;  // the recomputing core's backward: 8 bytes per score, not 12
  bool norm_kernel;  // the qk-norms take nn/rms_norm_cpu's kernels (fp32 inputs: no autocast)
  int64_t td() const { return tokens * hidden; }
  int64_t caption() const { return batch * text * hidden; }
  // The linear core's [B, H, N, d + 1] tensors: v padded with ones, and the product holding the normaliser.
  int64_t padded() const { return td() / head_dim * (head_dim + 1); }
};

Sizes sizes_of(const models::SanaConfig& config, const SanaActivationShape& shape) {
  Sizes s{};
  s.batch = shape.batch;
  s.patches = (shape.latent_height / config.patch_size) * (shape.latent_width / config.patch_size);
  s.tokens = shape.batch * s.patches;
  s.hidden = config.inner_dim();
  s.head_dim = config.attention_head_dim;
  s.cross_inner = config.cross_inner_dim();
  s.cross_heads = config.num_cross_attention_heads;
  s.ff_hidden = static_cast<int64_t>(config.mlp_ratio * static_cast<double>(s.hidden));
  s.text = shape.text_tokens;
  s.caption_channels = config.caption_channels;
  s.in_elements = shape.batch * config.in_channels * shape.latent_height * shape.latent_width;
  s.out_elements = shape.batch * config.out_channels * shape.latent_height * shape.latent_width;
  s.state = shape.batch * (s.patches + kModulationRows + shape.text_tokens) * s.hidden;
  s.c = shape.compute_bytes;
  s.low_precision = shape.compute_bytes < kFloat32;
  s.fused_attention = shape.attention_core == nn::AttentionCoreForm::fused;
  s.recomputing_attention = shape.attention_core == nn::AttentionCoreForm::recomputing;
  s.fused_softmax_backward = shape.fused_softmax_backward;
  s.norm_kernel = shape.cpu_rms_norm_kernel && shape.compute_bytes == kFloat32;
  s.frozen = !shape.training_loss;
  s.qk_norm = config.qk_norm;
  return s;
}

using Part = BlockPart;

// The qk-norms (nn::RMSNorm over all heads' channels) on q and k: each keeps its input, an fp32 1/rms per token and,
// for its weight's gradient, the normalised input ([tokens, width] compute dtype each); nn/rms_norm_cpu's kernels
// keep no normalised input.
int64_t qk_norms(const Sizes& s, int64_t query_tokens, int64_t key_tokens, int64_t width) {
  if (!s.qk_norm) return 0;
  const int64_t tensors = s.norm_kernel ? 1 : 2;
  return (query_tokens + key_tokens) * (tensors * width * s.c + kFloat32);
}

// attn1, the ReLU linear self-attention: to_q / to_k / to_v on the modulated norm's output, the linear core
// (nn::relu_linear_attention inside an attention-core region), to_out.0, its output kept by the gate multiply.
Part linear_attention(const Sizes& s, bool selective) {
  const int64_t td = s.td(), c = s.c;
  // Training: the projections keep their input (three autocast casts of the fp32 norm output, or in fp32 the
  // output itself, shared).
  int64_t inputs = 0;
  if (!s.frozen) inputs = s.low_precision ? 3 * td * c : td * kFloat32;
  const int64_t norms = qk_norms(s, s.tokens, s.tokens, s.hidden);
  // The core: ReLU keeps its outputs (q, k in the compute dtype); the two batched matmuls keep fp32 contiguous
  // copies of q and k (the heads are strided views), v padded with a row of ones, and the product whose last column
  // is the normaliser (kept by the division, beside the normaliser + eps per token and head). Selective keeps the
  // region's inputs q, k and v.
  int64_t core = 0;
  if (selective) {
    core = 3 * td * c;
  } else {
    core = 2 * td * c + 2 * td * kFloat32 + 2 * s.padded() * kFloat32 + s.padded() / (s.head_dim + 1) * kFloat32;
  }
  // to_out.0's input (the heads transposed back, a copy) in training, and its output kept by the gate multiply.
  const int64_t context = s.frozen ? 0 : td * c;
  const int64_t gated_output = td * c;
  const int64_t weights = s.low_precision ? 4 * s.hidden * s.hidden * c : 0;
  Part part;
  part.saved = inputs + norms + core + context + gated_output + weights;
  // Backward of the core: the gradients of the padded product and of its operands in fp32, beside what it keeps
  // (selective: the recomputed core first).
  const int64_t core_backward = 3 * s.padded() * kFloat32 + (selective ? 2 * s.padded() * kFloat32 + 2 * td * kFloat32 : 0);
  part.backward = std::max(core_backward, 2 * td * kFloat32 + td * c);
  return part;
}

// attn2, the cross-attention to the caption: q from the residual stream, k / v from the projected caption (the
// state's payload rows, copied out by each projection), nn::run_attention_core under the text mask, to_out.0.
Part cross_attention(const Sizes& s) {
  const int64_t c = s.c;
  const int64_t tq = s.tokens * s.cross_inner;                // q and the context, [B, N, inner]
  const int64_t kv = s.batch * s.text * s.cross_inner;        // k or v, [B, L, inner]
  const int64_t scores = s.tokens * s.cross_heads * s.text;   // [B, heads, N, L]
  int64_t inputs = 0;
  if (!s.frozen) inputs = (s.low_precision ? s.td() * c : s.td() * kFloat32) + 2 * s.caption() * (s.low_precision ? c : kFloat32);
  const int64_t norms = qk_norms(s, s.tokens, s.batch * s.text, s.cross_inner);
  int64_t core = tq * c + 2 * kv * c, probabilities = 0;
  if (s.fused_attention) {
    probabilities = s.tokens * s.cross_heads * kFloat32;
  } else if (!s.recomputing_attention) {
    // fp32 for the softmax's backward; the compute-dtype copy is kept by the value matmul for v's gradient only, so
    // not under infer --grad, where v comes from the frozen caption projection and needs none (measured: the plain
    // bf16 core's guided step 14.6% over the tracked peak with the copy counted, 1% without).
    probabilities = scores * (kFloat32 + (s.low_precision && !s.frozen ? c : 0));
  }
  const int64_t context = (s.fused_attention || !s.frozen) ? tq * c : 0;
  const int64_t weights = s.low_precision ? (2 * s.hidden * s.cross_inner + 2 * s.hidden * s.cross_inner) * c : 0;
  Part part;
  part.saved = inputs + norms + core + probabilities + context + weights;
  const int64_t incoming = s.td() * c;
  int64_t core_backward = 0;
  if (s.fused_attention) {
    core_backward = incoming + tq * c + 2 * kv * c + tq * kFloat32;
  } else if (s.recomputing_attention) {
    const int64_t queries = s.patches;
    const int64_t chunk_rows = nn::recompute_chunk_rows(queries);
    // Chunks of query rows within chunks of the batch (nn::recompute_chunk_rows, nn::recompute_chunk_batch).
    const double chunk = static_cast<double>(chunk_rows) / static_cast<double>(queries) *
                         nn::recompute_chunk_batch_share(s.batch, s.cross_heads, chunk_rows, s.text);
    const int64_t per_score = s.fused_softmax_backward ? 4 * c : 12;  // as in latte_t2v's estimate
    core_backward =
        incoming + 2 * tq * c + 2 * kv * kFloat32 + static_cast<int64_t>(chunk * static_cast<double>(per_score * scores));
  } else {
    core_backward = 2 * scores * kFloat32;
  }
  part.backward = std::max(core_backward, incoming + 2 * tq * c + 2 * s.td() * kFloat32);
  return part;
}

// The GLUMBConv feed-forward on the token grid ([B, D, H, W], a strided view of the norm's output): the convolutions
// keep their inputs whether their weights train or not (LibTorch's convolution backward saves input and weight for
// every gradient), so frozen weights save nothing here: conv_inverted's input (under autocast its cast, in fp32 the
// norm's output itself), SiLU's input and output (conv_depth's input), conv_depth's output (the gate's halves, kept
// by SiLU and the product), SiLU(gate) and the product (conv_point's input); conv_point's output is kept by the gate
// multiply.
Part glumb_conv(const Sizes& s) {
  const int64_t td = s.td(), c = s.c;
  const int64_t wide = 2 * s.ff_hidden * s.tokens;  // [B, 2h, H, W]
  const int64_t half = s.ff_hidden * s.tokens;      // [B, h, H, W]
  Part part;
  part.saved = (s.low_precision ? td * c : td * kFloat32) + 3 * wide * c + 2 * half * c + td * c;
  if (s.low_precision) part.saved += (s.hidden * 2 * s.ff_hidden + 2 * s.ff_hidden * 9 + s.ff_hidden * s.hidden) * c;
  // Backward: the gate multiply's fp32 products. The gradients through conv_point, the product, the SiLUs and the
  // convolutions each free a saved tensor of their own size as they come: measured, they never rise above that.
  part.backward = 2 * td * kFloat32 + td * c;
  return part;
}

BlockFootprint block_footprint(const Sizes& s, bool selective) {
  const int64_t td = s.td();
  const int64_t modulation = s.batch * kModulationRows * s.hidden * kFloat32;
  std::vector<Part> parts;
  Part norm1 = modulated_norm_part(s.tokens, s.hidden, selective);
  norm1.saved += modulation;
  parts.push_back(norm1);
  parts.push_back(linear_attention(s, selective));
  parts.push_back(cross_attention(s));
  parts.push_back(modulated_norm_part(s.tokens, s.hidden, selective));
  parts.push_back(glumb_conv(s));

  // In flight through the block's backward: the fp32 gradient of its output state, the residual stream's, and under
  // training the largest weight gradient before it is accumulated (conv_inverted's).
  const int64_t in_flight = s.state * kFloat32 + td * kFloat32 + (s.frozen ? 0 : s.hidden * 2 * s.ff_hidden * kFloat32);
  BlockFootprint block = footprint_of_parts(parts, in_flight);
  // Forward at the feed-forward (in forward, or in a checkpointed block's recompute): the saved set, the state, the
  // norm outputs and the grid copy as fp32 locals.
  block.backward_peak = std::max(block.backward_peak, block.saved + s.state * kFloat32 + 3 * td * kFloat32);
  block.backward_peak = std::max(block.backward_peak, in_flight + 2 * s.state * kFloat32 + modulation);
  return block;
}

// The end of the model's forward: the embedded tokens and the initial and final states, the output norm's input
// (the state's image rows) with its statistics, its output and proj_out's input cast, and proj_out's output beside its
// unpatchified copy (and that copy's fp32 cast under autocast).
int64_t model_forward_end(const Sizes& s) {
  const int64_t td = s.td();
  int64_t bytes = td * kFloat32 + 2 * s.state * kFloat32;
  bytes += td * kFloat32 + 2 * s.tokens * kFloat32 + td * kFloat32 + (s.low_precision ? td * s.c : 0);
  bytes += s.out_elements * (s.c + kFloat32);
  return bytes;
}

// What the head keeps after the model returns: the output norm's input and statistics, and (training) proj_out's
// input.
int64_t head_saved(const Sizes& s) {
  const int64_t td = s.td();
  int64_t bytes = td * kFloat32 + 2 * s.tokens * kFloat32;
  if (!s.frozen) bytes += s.low_precision ? td * s.c : td * kFloat32;
  return bytes;
}

// The loss beside the model's fp32 output: training, flow matching's MSE against noise - x0 (the target, the
// difference and its square, output-sized fp32); infer --grad, the guidance's combination and objective, about two
// output-sized tensors.
int64_t loss_peak(const Sizes& s) {
  return s.out_elements * kFloat32 + (s.frozen ? 2 : 3) * s.out_elements * kFloat32;
}

// Built before the first block and freed after backward: the patch embedding's input (its autocast cast) and, in
// training, the caption's projection (its input cast, GELU's input and output) and norm (input, output, 1/rms); under
// infer --grad the guidance step's latent-sized tensors (taken as half the input under classifier-free guidance).
int64_t embedding_saved(const Sizes& s) {
  int64_t bytes = s.in_elements * (s.low_precision ? s.c : kFloat32);
  if (s.frozen) return bytes + 4 * (s.in_elements / 2) * kFloat32;
  const int64_t element = s.low_precision ? s.c : kFloat32;
  bytes += (s.low_precision ? s.batch * s.text * s.caption_channels * s.c : 0) + 2 * s.caption() * element;
  bytes += 2 * s.caption() * kFloat32;
  return bytes;
}

}  // namespace

StackMemory sana_stack(const models::SanaConfig& config, const SanaActivationShape& shape, bool selective) {
  const Sizes s = sizes_of(config, shape);
  StackMemory stack;
  for (int64_t i = 0; i < config.num_layers; ++i) stack.blocks.push_back(block_footprint(s, selective));
  stack.block_input = s.state * kFloat32;
  stack.block_output = 2 * stack.block_input;
  stack.head_peak = std::max(model_forward_end(s), head_saved(s) + loss_peak(s));
  stack.alive_throughout = embedding_saved(s);
  return stack;
}

StackPhases sana_activation_phases(const models::SanaConfig& config, SanaActivationShape shape, c10::DeviceType device,
                                   c10::ScalarType compute_dtype, const memory::CheckpointRunner& runner) {
  auto stack_of = [&](const SanaActivationShape& each, bool selective) { return sana_stack(config, each, selective); };
  return phases_with_attention_cores(shape, device, compute_dtype, runner, stack_of);
}

int64_t sana_activation_estimate(const models::SanaConfig& config, SanaActivationShape shape, c10::DeviceType device,
                                 c10::ScalarType compute_dtype, const memory::CheckpointRunner& runner) {
  return sana_activation_phases(config, shape, device, compute_dtype, runner).peak();
}

}  // namespace tune::recipes::sana
