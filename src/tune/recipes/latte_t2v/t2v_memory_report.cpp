// Analytic activation-memory estimate for the text-to-video Latte's blocks: a count of the tensors autograd saves in
// models/latte_t2v.cpp, models/latte_t2v_layers.cpp and nn/ (LibTorch 2.x, CPU or CUDA autocast), in the shape of
// recipes/latte/latte_memory_report.cpp.
#include "tune/recipes/latte_t2v/t2v_memory_report.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "tune/nn/attention_core.h"
#include "tune/nn/gelu_linear.h"

namespace tune::recipes::latte_t2v {
namespace {

constexpr int64_t kFloat32 = 4;
constexpr int64_t kModulationRows = 6;  // adaln_single's timestep6: shift, scale, gate for attention and FF

struct Sizes {
  int64_t batch, frames, patches, tokens;  // tokens: B * F * N, every block sees all of them
  int64_t payload;                         // P: payload rows per frame row of the state
  int64_t state;                           // elements of the stack's state [B*F, N + P, D]
  int64_t hidden, inner, heads, text, caption_channels, out_per_token, in_elements;
  int64_t c;
  bool low_precision, fused_attention, training_loss;
  bool gemm_workspace;  // the fp32-accumulate CPU kernels' workspace (cpu_gemm_workspace) exists
  bool recomputing_attention;  // tune's core, recomputing its probabilities in backward
  bool fused_softmax_backward;  // the recomputing core's backward: 8 bytes per score, not 12
  // The weights are frozen under infer --grad: a matmul then keeps its weight only (for its input's gradient), and
  // nothing before the state is differentiated but the latents. The payload rows (timestep6 and the projected
  // caption) are rows of the state, which needs a gradient as soon as the latents do, so autograd still
  // differentiates the modulation and the caption's keys and values inside the blocks: the gate multiplies keep
  // their outputs and the cross-attention core keeps what it keeps in training.
  bool frozen;
  bool recomputing_gelu;  // net.2 keeps GELU's input alone, recomputing its output in backward (nn::run_gelu_linear)
  bool keeping_gelu;      // net.2 keeps GELU's output and its fp32 weight (a block's recompute)
  int64_t td() const { return tokens * hidden; }
  int64_t caption() const { return batch * text * hidden; }  // the projected caption [B, L, D]
  int64_t outputs() const { return tokens * out_per_token; }
};

Sizes sizes_of(const models::LatteT2VConfig& config, const T2VActivationShape& shape) {
  Sizes s{};
  s.batch = shape.batch;
  s.frames = shape.frames;
  s.patches = (shape.latent_height / config.patch_size) * (shape.latent_width / config.patch_size);
  s.tokens = shape.batch * shape.frames * s.patches;
  s.payload = (kModulationRows + shape.text_tokens + shape.frames - 1) / shape.frames;
  s.state = shape.batch * shape.frames * (s.patches + s.payload) * config.inner_dim();
  s.hidden = config.inner_dim();
  s.inner = 4 * s.hidden;
  s.heads = config.num_attention_heads;
  s.text = shape.text_tokens;
  s.caption_channels = config.caption_channels;
  s.out_per_token = config.patch_size * config.patch_size * config.out_channels;
  s.in_elements = shape.batch * shape.frames * config.in_channels * shape.latent_height * shape.latent_width;
  s.c = shape.compute_bytes;
  s.low_precision = shape.compute_bytes < kFloat32;
  s.gemm_workspace = s.low_precision && shape.fp32_accumulate_products;
  s.fused_attention = shape.attention_core == nn::AttentionCoreForm::fused;
  s.recomputing_attention = shape.attention_core == nn::AttentionCoreForm::recomputing;
  s.fused_softmax_backward = shape.fused_softmax_backward;
  s.training_loss = shape.training_loss;
  s.frozen = !shape.training_loss;
  s.recomputing_gelu = nn::gelu_linear_recomputes(shape.kept_until_backward, !s.frozen);
  s.keeping_gelu = nn::gelu_linear_keeps(true, shape.kept_until_backward, !s.frozen);
  return s;
}

using Part = BlockPart;

// An attention layer: to_q / to_k / to_v (nn::LoraLinear, no adapter), nn::run_attention_core, to_out.0.
// Self-attention reads the modulated norm's output for all three projections (`kv` = td); the spatial blocks'
// cross-attention reads the residual stream for q and the sample's projected caption for k and v (`kv` = B * L * D,
// projected once per sample, not per frame). `scores`: the probability elements of the plain core; `chunk`: the
// fraction of them the recomputing core rebuilds at once in backward; `gated`: the output is multiplied by the
// adaLN gate (self-attention), which keeps it.
Part attention(const Sizes& s, int64_t kv, int64_t scores, double chunk, bool self, bool gated) {
  const int64_t td = s.td();
  const int64_t c = s.c;
  // Under training a matmul keeps its input for the weight's gradient. Under autocast each projection casts the
  // fp32 input itself (autocast caches only weights): three compute-dtype copies of the normed input for a
  // self-attention, one of the stream and two of the caption for the cross-attention. In fp32 the three
  // self-attention projections share the norm's output; the cross-attention's k and v fold a strided view of the
  // caption (the payload) into a copy each.
  int64_t inputs = 0;
  if (!s.frozen) {
    if (self) inputs = s.low_precision ? 3 * td * c : td * kFloat32;
    else inputs = (s.low_precision ? td * c : td * kFloat32) + 2 * kv * (s.low_precision ? c : kFloat32);
  }
  // The core: the plain one's matmuls keep the scaled q (a copy: the heads are a transposed view), k and v copies
  // folded for the batched matmul, the fp32 probabilities (softmax's output) and their compute-dtype copy (the value
  // matmul's). The recomputing core keeps q, k, v; the fused one q, k, v, its output and an fp32
  // log-sum-exp per query row and head. q, k and v all need a gradient, frozen weights or not (see Sizes::frozen).
  int64_t core = td * c + 2 * kv * c, probabilities = 0;
  if (s.fused_attention) {
    probabilities = s.tokens * s.heads * kFloat32;
  } else if (!s.recomputing_attention) {
    probabilities = scores * (kFloat32 + (s.low_precision ? c : 0));
  }
  // The context: to_out.0's input (a copy, heads transposed back) in training; the fused core keeps its output,
  // which is already laid out as to_out.0's input (LibTorch's CPU kernel writes [B, T, H, hd]), whatever the weights.
  const int64_t context = (s.fused_attention || !s.frozen) ? td * c : 0;
  // to_out.0's output, kept by the gate multiply for the gate's gradient.
  const int64_t gated_output = gated ? td * c : 0;
  // Weight copies under autocast, kept by the four matmuls (frozen weights are not cached but cast per call: the
  // same count).
  const int64_t weights = s.low_precision ? 4 * s.hidden * s.hidden * c : 0;
  Part part;
  part.saved = inputs + core + probabilities + context + gated_output + weights;

  // Backward, above this part's own saved set, with the gradient of its output (compute dtype) coming in. By the
  // core's turn the gate multiply and to_out.0 have freed what they kept (the fused core's output stays: the
  // kernel's backward reads it).
  const int64_t incoming = td * c;
  const int64_t released = gated_output + (s.fused_attention ? 0 : context);
  int64_t core_backward = 0;
  if (s.fused_attention) {
    // The gradients of q, k, v and the kernel's fp32 accumulator for dq.
    core_backward = incoming + td * c + 2 * kv * c + td * kFloat32 - released;
  } else if (s.recomputing_attention) {
    // The scaled q recomputed and q's gradient, fp32 accumulators for k's and v's, and per chunk the fp32
    // probabilities with their incoming and outgoing fp32 gradients.
    // Fused softmax backward (bf16 on the CPU): 4 compute-dtype score tensors instead (nn/softmax_bf16.h).
    const int64_t per_score = s.fused_softmax_backward ? 4 * c : 12;
    core_backward = incoming + 2 * td * c + 2 * kv * kFloat32 +
                    static_cast<int64_t>(chunk * static_cast<double>(per_score * scores)) - released;
  } else {
    // The fp32 probabilities with their incoming and outgoing fp32 gradients (12 bytes per score) where the value
    // matmul has freed v and the probabilities' compute-dtype copy.
    core_backward = 2 * scores * kFloat32 - (s.low_precision ? scores * c : 0) - kv * c - released;
  }
  // After the core: the gradients of q, k and v through their projections into the fp32 input's gradient (the
  // core's kept set, the context and the gated output freed by then).
  const int64_t projections = td * c + 2 * kv * c + td * c + 2 * td * kFloat32 -
                              (core + probabilities + context + gated_output);
  part.backward = std::max({core_backward, projections, incoming + td * c});
  return part;
}

// diffusers' FeedForward ("gelu-approximate"): net.0.proj [D -> 4D], tanh GELU (an activation region), net.2
// [4D -> D], its output kept by the gate multiply.
Part feed_forward(const Sizes& s, bool selective) {
  const int64_t td = s.td(), ti = s.tokens * s.inner;
  const int64_t c = s.c;
  Part part;
  // GELU's input (net.0.proj's output) for its own gradient, net.2's output for the gate's and, for the weight
  // gradients (training), net.0.proj's input (its cast, or in fp32 the norm's output itself) and GELU's output
  // (net.2's input), unless net.2 recomputes it.
  part.saved = ti * c + td * c;
  if (!s.frozen) part.saved += (s.low_precision ? td * c : td * kFloat32) + (s.recomputing_gelu ? 0 : ti * c);
  if (s.low_precision) {  // weight copies; net.2's none where it recomputes or keeps GELU (its fp32 weight)
    part.saved += (s.recomputing_gelu || s.keeping_gelu ? 1 : 2) * s.hidden * s.inner * c;
  }
  // Backward: the gate multiply's fp32 products (the gradient into net.2's output, and the gate's), then net.2's
  // gradient in and its input's gradient out ([tokens, 4D], with the fp32-accumulate kernel's workspace under
  // autocast), then GELU's input gradient beside its output's (in training net.2 has freed its input, GELU's
  // output, by then). Selective recomputes GELU's output first. A recomputing net.2 rebuilds GELU's output for its
  // weight's gradient and frees it before its input's gradient: the same two [tokens, 4D] tensors at most, above a
  // saved set without GELU's output.
  const int64_t gate = 2 * td * kFloat32 + (s.low_precision ? td * c : 0);
  const int64_t down = ti * c + (s.gemm_workspace ? cpu_gemm_workspace(s.tokens, s.hidden, s.inner) : 0);
  const int64_t gelu = s.recomputing_gelu ? 2 * ti * c - td * c
                                          : (selective ? 3 : 2) * ti * c - (s.frozen ? 0 : ti * c) - td * c;
  part.backward = std::max({gate, down, gelu});
  return part;
}

// One block: `spatial` (self-attention over a frame's N patches, then cross-attention to the caption) or temporal
// (self-attention over the F frames at each patch position).
BlockFootprint block_footprint(const Sizes& s, bool spatial, bool selective) {
  const int64_t td = s.td();
  // The block's modulation: scale_shift_table + timestep6, [B, 6, D] fp32, whose scale and gate views the norms and
  // gate multiplies keep.
  const int64_t modulation = s.batch * kModulationRows * s.hidden * kFloat32;
  std::vector<Part> parts;
  // norm1 keeps the block's input: for a spatial block the reshape of the state's patch rows into [B, F*N, D] (a
  // copy: the payload rows interleave), for a temporal block its (b f) n d -> (b n) f d rearrangement (a copy too).
  // The state itself is kept by nothing (narrow and cat keep no tensors).
  Part norm1 = modulated_norm_part(s.tokens, s.hidden, selective);
  norm1.saved += modulation;
  parts.push_back(norm1);
  const int64_t length = spatial ? s.patches : s.frames;
  // The recomputing core's backward works through chunks of the sequences (nn::recompute_chunk_batch).
  const int64_t sequences = s.tokens / length;
  parts.push_back(attention(s, td, s.tokens * s.heads * length,
                            nn::recompute_chunk_batch_share(sequences, s.heads, length, length), /*self=*/true,
                            /*gated=*/true));
  if (spatial) {
    // All F*N queries of a sample attend to its L caption tokens under the text mask, in chunks of
    // nn::recompute_chunk_rows query rows in the recomputing core's backward.
    const int64_t queries = s.frames * s.patches;
    const int64_t chunk_rows = nn::recompute_chunk_rows(queries);
    const double chunk = static_cast<double>(chunk_rows) / static_cast<double>(queries) *
                         nn::recompute_chunk_batch_share(s.batch, s.heads, chunk_rows, s.text);
    parts.push_back(attention(s, s.caption(), s.tokens * s.heads * s.text, chunk, /*self=*/false, /*gated=*/false));
  }
  parts.push_back(modulated_norm_part(s.tokens, s.hidden, selective));
  parts.push_back(feed_forward(s, selective));

  // In flight through the whole of the block's backward: the fp32 gradient of the block's output state (held
  // until the payload rows' gradient is taken at the block's start) and the residual stream's ([tokens, D] fp32,
  // a copy out of the state's patch rows), and under training the largest weight gradient before it is accumulated.
  const int64_t in_flight = s.state * kFloat32 + td * kFloat32 + (s.frozen ? 0 : s.hidden * s.inner * kFloat32);
  BlockFootprint block = footprint_of_parts(parts, in_flight);
  // Forward at net.2 (in forward, or in a checkpointed block's recompute, the output's gradient then in flight): the
  // whole saved set, the block's two norm outputs (fp32 locals of the block's forward, counted in the saved set
  // only where fp32 training keeps them for the projections), GELU's output where net.2 does not keep it (frozen
  // weights, or net.2 recomputing it) and, under autocast, the fp32-accumulate kernel's workspace for the [tokens, 4D] x [4D, D] product.
  int64_t ff_forward = s.state * kFloat32 + ((s.frozen || s.low_precision) ? 2 * td * kFloat32 : 0);
  if (s.frozen || s.recomputing_gelu) ff_forward += s.tokens * s.inner * s.c;
  if (s.gemm_workspace) ff_forward += cpu_gemm_workspace(s.tokens, s.inner, s.hidden);
  block.backward_peak = std::max(block.backward_peak, block.saved + ff_forward);
  // The block's start, once norm1 is done: the input state's gradient assembled from its patch rows and its
  // payload rows (one state-sized tensor each) beside the output's.
  block.backward_peak = std::max(block.backward_peak, in_flight + 2 * s.state * kFloat32 + modulation);
  return block;
}

// After the last block, at the end of the model's forward: the embedded tokens and the initial state (locals of
// LatteT2VImpl::forward), the final state, the output norm's input (the state's patch rows copied into [B, F*N, D])
// with its statistics, its output and proj_out's input cast, and proj_out's output beside its unpatchified copy
// (and that copy's fp32 cast under autocast). When block 0 is checkpointed its saved input is the initial state,
// counted twice here (one state, a small share).
int64_t model_forward_end(const Sizes& s) {
  const int64_t td = s.td();
  int64_t bytes = td * kFloat32 + 2 * s.state * kFloat32;
  bytes += td * kFloat32 + 2 * s.tokens * kFloat32 + td * kFloat32 + (s.low_precision ? td * s.c : 0);
  bytes += s.outputs() * (s.c + kFloat32);
  return bytes;
}

// What the head keeps after the model returns: the output norm's input and statistics, and (training) proj_out's
// input, its cast or in fp32 the norm's output.
int64_t head_saved(const Sizes& s) {
  const int64_t td = s.td();
  int64_t bytes = td * kFloat32 + 2 * s.tokens * kFloat32;
  if (!s.frozen) bytes += s.low_precision ? td * s.c : td * kFloat32;
  return bytes;
}

// The loss on the model's fp32 output [B, F, out, H, W], beside it. Training: the learned-variance diffusion loss
// (diffusion/gaussian_diffusion.cpp: posterior and model means and log-variances, the KL and the t = 0 decoder
// likelihood, all [B, F, C, H, W] fp32), which peaks at about 35 tensors the size of the clean input beyond the
// model's output (measured for latte_memory_report, the same GaussianDiffusion code). infer --grad: the
// classifier-free combination's temporaries, about one more output-sized tensor (the tensors the guidance step keeps
// while it differentiates are counted in embedding_saved).
int64_t loss_peak(const Sizes& s) {
  if (!s.training_loss) return 2 * s.outputs() * kFloat32;
  return s.outputs() * kFloat32 + 35 * s.in_elements * kFloat32;
}

int64_t head_peak(const Sizes& s) { return std::max(model_forward_end(s), head_saved(s) + loss_peak(s)); }

// Built before the first block and freed at the end of backward: the patch embedding's input as its convolution
// keeps it (the model's input in fp32, its cast under autocast; kept for the input's gradient under frozen weights
// too) and, in training, the caption projection's (its input cast, GELU's input and output: [B, L, D] each). Under
// infer --grad also what the guidance step holds while it differentiates: the predicted clean latents, the
// posterior mean and variance and the squared frame differences' input, four fp32 tensors of the latents' size,
// taken as half the model's input (classifier-free guidance, the default, doubles the batch; without it these are
// undercounted by half, a few latent-sized tensors).
int64_t embedding_saved(const Sizes& s) {
  int64_t bytes = s.in_elements * (s.low_precision ? s.c : kFloat32);
  if (s.frozen) return bytes + 4 * (s.in_elements / 2) * kFloat32;
  const int64_t caption_bytes = s.low_precision ? s.c : kFloat32;
  bytes += (s.low_precision ? s.batch * s.text * s.caption_channels * s.c : 0) + 2 * s.caption() * caption_bytes;
  return bytes;
}

}  // namespace

StackMemory latte_t2v_stack(const models::LatteT2VConfig& config, const T2VActivationShape& shape, bool selective) {
  const Sizes s = sizes_of(config, shape);
  StackMemory stack;
  for (int64_t i = 0; i < 2 * config.num_layers; ++i) {
    stack.blocks.push_back(block_footprint(s, /*spatial=*/i % 2 == 0, selective));  // LatteT2VImpl::is_spatial
  }
  // A checkpointed block (or sqrt segment) keeps its input, the fp32 state with its payload rows. While its recompute
  // is differentiated it holds that input beside the recomputed output (stack_phases counts a block's own kept input
  // nowhere else).
  stack.block_input = s.state * kFloat32;
  stack.block_output = 2 * stack.block_input;
  stack.head_peak = head_peak(s);
  stack.alive_throughout = embedding_saved(s);
  return stack;
}

StackPhases t2v_activation_phases(const models::LatteT2VConfig& config, T2VActivationShape shape,
                                  c10::DeviceType device, c10::ScalarType compute_dtype,
                                  const memory::CheckpointRunner& runner) {
  auto stack_of = [&](const T2VActivationShape& each, bool selective) {
    return latte_t2v_stack(config, each, selective);
  };
  return phases_with_attention_cores(shape, device, compute_dtype, runner, stack_of);
}

int64_t t2v_activation_estimate(const models::LatteT2VConfig& config, T2VActivationShape shape,
                                c10::DeviceType device, c10::ScalarType compute_dtype,
                                const memory::CheckpointRunner& runner) {
  return t2v_activation_phases(config, shape, device, compute_dtype, runner).peak();
}

}  // namespace tune::recipes::latte_t2v
