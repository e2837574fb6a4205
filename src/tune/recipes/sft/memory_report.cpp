// Analytic activation-memory estimate for Llama decoder layers: a count of the tensors autograd saves in
// models/llama_layers.cpp and nn/ (LibTorch 1.13, CPU or CUDA autocast), checked against the tracking allocator
// by tests/recipes/test_checkpointing_memory.cpp.
#include "tune/recipes/sft/memory_report.h"

#include "tune/models/llama_layers.h"

#include <algorithm>
#include <set>
#include <string>

namespace tune::recipes::sft {
namespace {

constexpr int64_t kFloat32 = 4;

struct Sizes {
  int64_t tokens, hidden, head_dim, q_width, kv_width, repeated_kv_width, intermediate, heads, batch, sequence, c;
  int64_t mask_batch;
  int64_t head_chunk_rows;
  int64_t residual;  // bytes per element of the residual stream: 4, or 2 with bf16_residual
  models::LlamaLoraOptions lora;
  bool base_weights_in_compute_dtype;
  bool low_precision;  // compute dtype narrower than the fp32 weights: autocast makes copies
  bool fused_attention;        // LibTorch's kernel (nn::AttentionCoreForm::fused)
  bool recomputing_attention;  // tune's core recomputing its probabilities (nn::AttentionCoreForm::recomputing)
  bool fused_softmax_backward;  // the recomputing core's backward: 8 bytes per score, not 12
  bool norm_kernel;  // RMSNorms of fp32 inputs take nn/rms_norm_cpu's kernels (the residual stream's, at least)
  int64_t swiglu_tensors;  // what a plainly run SwiGLU product keeps: gate, silu(gate), up; nn/swiglu_cpu: gate, up
  bool qk_norm;  // Qwen3's per-head query/key norms
  bool sandwich_norms;    // Gemma 2: post_attention_layernorm on the attention output, pre_/post_feedforward_layernorm
  bool softcapped_scores;  // Gemma 2: tanh soft cap on the attention scores (always tune's own core)
  bool softcapped_logits;  // Gemma 2: tanh soft cap on the LM head's logits
  int64_t kv_heads;
};

Sizes sizes_of(const models::LlamaConfig& config, const ActivationShape& shape) {
  Sizes s{};
  s.tokens = shape.batch * shape.sequence;
  s.hidden = config.hidden_size;
  s.head_dim = config.resolved_head_dim();
  s.q_width = config.num_attention_heads * s.head_dim;
  s.kv_width = config.num_key_value_heads * s.head_dim;
  // With grouped-query attention, repeat_kv materialises keys and values at the query heads' width.
  s.repeated_kv_width = config.num_key_value_heads < config.num_attention_heads ? s.q_width : s.kv_width;
  s.intermediate = config.intermediate_size;
  s.heads = config.num_attention_heads;
  s.batch = shape.batch;
  s.sequence = shape.sequence;
  s.c = shape.compute_bytes;
  s.mask_batch = shape.mask_batch;
  s.head_chunk_rows = shape.head_chunk_rows;
  s.residual = shape.bf16_residual ? 2 : kFloat32;
  s.lora = shape.lora;
  s.base_weights_in_compute_dtype = shape.base_weights_in_compute_dtype;
  s.low_precision = shape.compute_bytes < kFloat32;
  s.fused_attention = shape.attention_core == nn::AttentionCoreForm::fused;
  s.recomputing_attention = shape.attention_core == nn::AttentionCoreForm::recomputing;
  s.fused_softmax_backward = shape.fused_softmax_backward;
  // The kernels take fp32 inputs and weights: not a bf16 residual stream, bf16 stored weights or an fp64 run.
  s.norm_kernel = shape.cpu_rms_norm_kernel && !shape.bf16_residual && !shape.base_weights_in_compute_dtype &&
                  shape.compute_bytes <= kFloat32;
  s.swiglu_tensors = shape.cpu_swiglu_kernel && models::hidden_activation_from_name(config.hidden_act) ==
                                                    models::HiddenActivation::silu
                         ? 2
                         : 3;
  s.qk_norm = config.has_qk_norm();
  s.sandwich_norms = config.is_gemma2();
  s.softcapped_scores = config.attn_logit_softcapping > 0;
  s.softcapped_logits = config.final_logit_softcapping > 0;
  s.kv_heads = config.num_key_value_heads;
  return s;
}

// The [tokens, width] tensors an RMSNorm keeps besides its per-row rsqrt: op by op (nn/rms_norm.cpp) its input
// (pow's backward) and the normalised tensor (the weight multiply's backward; not for a frozen weight, LoRA); with
// nn/rms_norm_cpu's kernels (fp32 input on the CPU) the input only. (LibTorch 1.13's mean kept the squares too;
// 2.x's mean backward needs only the shape: measured, one [tokens, hidden] fp32 tensor less per norm.)
int64_t rms_norm_tensors(const Sizes& s, bool fp32_input) {
  return s.lora.lora.rank > 0 || (s.norm_kernel && fp32_input) ? 1 : 2;
}

// The residual stream's RMSNorms (input_layernorm, post_attention_layernorm, the final norm) compute in fp32 and
// keep rms_norm_tensors' tensors and the per-token rsqrt.
int64_t rms_norm_saved(const Sizes& s) {
  return rms_norm_tensors(s, s.residual == kFloat32) * s.tokens * s.hidden * kFloat32 + s.tokens * kFloat32;
}

// Gemma 2's post-attention and post-feedforward norms, on o_proj's and down_proj's outputs: fp32 inputs only
// without autocast.
int64_t sandwich_norm_saved(const Sizes& s) {
  return rms_norm_tensors(s, !s.low_precision) * s.tokens * s.hidden * kFloat32 + s.tokens * kFloat32;
}

// Qwen3's q_norm and k_norm (RMSNorm over head_dim of [tokens, heads, head_dim]): rms_norm_saved's tensors at the
// query and key widths, with one rsqrt per token and head. (Not yet checked against the tracking allocator.)
int64_t qk_norm_saved(const Sizes& s) {
  if (!s.qk_norm) return 0;
  const int64_t tensors = rms_norm_tensors(s, !s.low_precision);
  return tensors * s.tokens * (s.q_width + s.kv_width) * kFloat32 + s.tokens * (s.heads + s.kv_heads) * kFloat32;
}

// The norm's output as seen by the `readers` projections that consume it: under autocast each linear casts the
// (non-leaf, so uncached) fp32 output itself and keeps its own copy; in fp32 they all keep the one output.
int64_t norm_output_for_matmuls(const Sizes& s, int64_t readers) {
  return s.low_precision ? readers * s.tokens * s.hidden * s.c : s.tokens * s.hidden * kFloat32;
}

// What the base projections keep of their inputs: the norm output's copies (as above), unless the base is frozen
// (LoRA): a matmul whose weight needs no gradient keeps no input. `readers` of a norm output.
int64_t base_inputs_from_norm(const Sizes& s, int64_t readers) {
  return s.lora.lora.rank > 0 ? 0 : norm_output_for_matmuls(s, readers);
}

// The compute-dtype input of o_proj or down_proj ([tokens, width]) as the base projection keeps it (frozen: not).
int64_t base_input(const Sizes& s, int64_t width) { return s.lora.lora.rank > 0 ? 0 : s.tokens * width * s.c; }

bool has_lora(const Sizes& s) { return s.lora.lora.rank > 0; }

// Fresh gradient of the largest trainable weight before it is added into .grad (gradients live across steps, this
// does not): a base weight, or with LoRA (base frozen) an adapter matrix.
int64_t largest_weight_gradient(const Sizes& s) {
  const int64_t widest = std::max({s.hidden, s.q_width, s.intermediate});
  if (has_lora(s)) return s.lora.lora.rank * widest * kFloat32;
  return std::max(s.hidden * s.intermediate, s.hidden * std::max(s.q_width, s.hidden)) * kFloat32;
}

// What the LoRA adapters of one layer keep (nn/lora_linear.cpp: output + lora_B(lora_A(dropout(x))) * scaling).
// Per adapted projection: lora_A's input in the compute dtype (its own autocast cast of an fp32 input, the dropped
// copy, or the input itself: the frozen base projection keeps none), with dropout the noise it multiplied by
// (LibTorch 1.13 on CPU: a tensor of the input's dtype), and lora_A's rank-r output, kept by lora_B.
int64_t lora_saved(const Sizes& s) {
  if (!has_lora(s)) return 0;
  struct Projection {
    const char* name;
    int64_t in;
    bool fp32_input;  // reads a norm's fp32 output (the others read a compute-dtype matmul result)
  };
  const Projection projections[] = {{"q_proj", s.hidden, true},          {"k_proj", s.hidden, true},
                                    {"v_proj", s.hidden, true},          {"o_proj", s.q_width, false},
                                    {"gate_proj", s.hidden, true},       {"up_proj", s.hidden, true},
                                    {"down_proj", s.intermediate, false}};
  const bool dropout = s.lora.lora.dropout > 0.0;
  int64_t bytes = 0;
  for (const Projection& p : projections) {
    const auto& targets = s.lora.target_modules;
    if (std::find(targets.begin(), targets.end(), p.name) == targets.end()) continue;
    const int64_t input_bytes = p.fp32_input ? s.residual : s.c;
    if (dropout) bytes += s.tokens * p.in * input_bytes;  // the dropout noise, in the input's dtype
    // lora_A's input in the compute dtype; with a bf16 residual stream a norm's output is bf16 already, and the
    // adapters reading it without dropout all keep that one tensor (counted once per norm, below).
    if (dropout || !p.fp32_input || s.residual == kFloat32) bytes += s.tokens * p.in * s.c;
    bytes += s.tokens * s.lora.lora.rank * s.c;           // lora_A's output
  }
  if (!dropout && s.residual != kFloat32) {
    const auto& targets = s.lora.target_modules;
    auto targeted = [&](std::initializer_list<const char*> names) {
      return std::any_of(names.begin(), names.end(), [&](const char* name) {
        return std::find(targets.begin(), targets.end(), name) != targets.end();
      });
    };
    if (targeted({"q_proj", "k_proj", "v_proj"})) bytes += s.tokens * s.hidden * s.c;  // input_layernorm's output
    if (targeted({"gate_proj", "up_proj"})) bytes += s.tokens * s.hidden * s.c;         // the MLP norm's output
  }
  return bytes;
}

// Under autocast each matmul keeps the compute-dtype copy of its weight (forward caches it for the autocast scope;
// backward needs it for the input gradient): q, k, v, o and the three MLP projections.
int64_t weight_copies(const Sizes& s) {
  if (!s.low_precision || s.base_weights_in_compute_dtype) return 0;
  return (s.hidden * (s.q_width + 2 * s.kv_width) + s.q_width * s.hidden + 3 * s.hidden * s.intermediate) * s.c;
}

// Attention scores of one layer, [B, heads, T, T] elements.
int64_t score_elements(const Sizes& s) { return s.batch * s.heads * s.sequence * s.sequence; }

// The causal mask, [B or 1, 1, T, T] bf16 (in the compute dtype for the fused core, models/llama.cpp), built once
// per forward and alive until backward ends.
int64_t mask_bytes(const Sizes& s) { return s.mask_batch * s.sequence * s.sequence * (s.fused_attention ? s.c : 2); }

// What the MLP half of a layer (post-attention norm, gate/up/down, and o_proj, whose backward precedes the
// attention core's) keeps for backward; `swiglu_tensors` [tokens, intermediate] tensors of the SwiGLU and `norm_saved`
// of the post-attention norm. Freed once backward has passed it, so the attention core's backward runs without it.
int64_t mlp_half_saved(const Sizes& s, int64_t swiglu_tensors, int64_t norm_saved) {
  int64_t bytes = norm_saved + base_inputs_from_norm(s, 2) + swiglu_tensors * s.tokens * s.intermediate * s.c;
  bytes += base_input(s, s.intermediate);  // down_proj's input
  // o_proj's input, unless it is a view of the fused kernel's output, which the kernel itself still keeps.
  if (!s.fused_attention) bytes += base_input(s, s.q_width);
  if (s.low_precision && !s.base_weights_in_compute_dtype) {
    bytes += (3 * s.hidden * s.intermediate + s.q_width * s.hidden) * s.c;  // weight copies
  }
  return bytes;
}

// The norms of a layer's MLP half as they save for backward: Llama's one pre-MLP norm (`norm_saved`); Gemma 2 adds
// post_feedforward_layernorm, whose input is down_proj's compute-dtype output (`post_norm_saved`).
int64_t mlp_norms_saved(const Sizes& s, int64_t norm_saved, int64_t post_norm_saved) {
  return norm_saved + (s.sandwich_norms ? post_norm_saved : 0);
}

// Gemma 2's soft cap keeps tanh's output, [B, H, T, T] in the compute dtype, for its backward (the division and the
// multiplication by the cap, numbers, keep nothing).
int64_t softcap_saved(const Sizes& s) { return s.softcapped_scores ? score_elements(s) * s.c : 0; }

// Gradients in flight through a layer's backward: the residual-stream gradient (in its dtype) and the fresh gradient
// of the weight being accumulated.
int64_t gradients_in_flight(const Sizes& s) { return s.tokens * s.hidden * s.residual + largest_weight_gradient(s); }

// The fused attention core (nn::attention_core_fused, where nn::uses_fused_attention says so: CUDA, and CPUs whose
// LibTorch kernel is the faster one): scaled_dot_product_attention keeps q, the repeated k and v, its output and an
// fp32 log-sum-exp per query row and head; no [B, H, T, T] tensor survives forward. The kernels lay the output out
// as [B, T, H, D], so o_proj's [tokens, heads * head_dim] input is a view of it, not a copy (measured on the CPU
// kernel by tests/recipes/test_checkpointing_memory.cpp).
int64_t fused_attention_saved(const Sizes& s) {
  return s.tokens * (2 * s.q_width + 2 * s.repeated_kv_width) * s.c + s.tokens * s.heads * kFloat32;
}
// Its backward, with the MLP half freed: the saved set above, the gradients of q, k and v, and the kernel's fp32
// accumulator for dq (FlashAttention-2; the memory-efficient kernel's workspace is of the same order).
int64_t fused_attention_phase(const Sizes& s, int64_t layer_saved_without_mlp) {
  return layer_saved_without_mlp + gradients_in_flight(s) + s.tokens * (s.q_width + 2 * s.repeated_kv_width) * s.c +
         s.tokens * s.q_width * kFloat32;
}

// The probabilities tune's plain core keeps: softmax's fp32 output, plus under autocast its compute-dtype copy for
// the value matmul. (The scores, masked in place, and their fp32 conversion are not kept: neither needs a saved
// input.) With a soft cap, tanh's output too.
int64_t kept_probabilities(const Sizes& s) {
  return score_elements(s) * (kFloat32 + (s.low_precision ? s.c : 0)) + softcap_saved(s);
}

// What the attention core keeps, o_proj's input included. The plain core's matmuls keep their operands, each a
// contiguous copy (the heads are transposed views): scaled rotated queries, keys and values (at the query heads'
// width under grouped-query attention), and the probabilities; the recomputing core keeps rotated q, k and v (keys
// and values at their own width: it repeats them itself); o_proj keeps the context reshaped to
// [tokens, heads * head_dim]. The fused kernel: fused_attention_saved.
int64_t attention_core_saved(const Sizes& s) {
  if (s.fused_attention) return fused_attention_saved(s);  // o_proj's input included: a view of the kernel's output
  if (s.recomputing_attention) return s.tokens * (s.q_width + 2 * s.kv_width) * s.c + base_input(s, s.q_width);
  return s.tokens * (s.q_width + 2 * s.repeated_kv_width) * s.c + base_input(s, s.q_width) + kept_probabilities(s);
}

// The attention core's backward, the MLP half freed (`layer_saved_without_mlp` is what is left of the layer's saved
// set). Plain core: of the probabilities' 6 bytes per score the bf16 copy is gone by the softmax's backward, but the
// fp32 probabilities, their incoming fp32 gradient and the outgoing one are alive at once (12 bytes per score), with
// the value gradient, computed first; a soft cap adds the gradient through tanh (1 - tanh^2 times the incoming one),
// one more compute-dtype score tensor while tanh's saved output is still alive. Recomputing core: one chunk of query
// rows (nn::recompute_chunk_rows: T/4, at least the measured minimum) of a chunk of sequences
// (nn::recompute_chunk_batch) against at most every key, 12 bytes per score
// as above (a soft cap adds the chunk's tanh), plus the context's gradient and its head-major copy, the scaled
// queries and their gradient, the fp32 key and value gradient accumulators and, under grouped-query attention, the
// repeated keys and values.
int64_t attention_phase(const Sizes& s, int64_t layer_saved_without_mlp) {
  if (s.fused_attention) return fused_attention_phase(s, layer_saved_without_mlp);
  if (!s.recomputing_attention) {
    const int64_t probabilities_copy = s.low_precision ? score_elements(s) * s.c : 0;
    return layer_saved_without_mlp - probabilities_copy + 2 * score_elements(s) * kFloat32 + softcap_saved(s) +
           gradients_in_flight(s) + s.tokens * s.repeated_kv_width * s.c;
  }
  const int64_t rows = nn::recompute_chunk_rows(s.sequence);
  const int64_t chunk_scores = nn::recompute_chunk_batch(s.batch, s.heads, rows, s.sequence) * s.heads * rows * s.sequence;
  // The fused softmax backward (bf16 on the CPU): the logits, the probabilities' gradient, the bf16 probabilities and
  // the logits' gradient at once, 4 compute-dtype tensors per score instead of 3 fp32 ones.
  const int64_t per_score = s.fused_softmax_backward ? 4 * s.c : 3 * kFloat32;
  // The context's incoming gradient (o_proj's input gradient, [B, T, heads * head_dim]) and the head-major copy
  // backward makes of it once for its products; the scaled queries and their gradient.
  int64_t bytes = layer_saved_without_mlp + per_score * chunk_scores + (s.softcapped_scores ? chunk_scores * s.c : 0) +
                  gradients_in_flight(s) + 2 * s.tokens * s.q_width * s.c + s.tokens * s.q_width * (s.c + s.c) +
                  2 * s.tokens * s.repeated_kv_width * kFloat32;
  if (s.repeated_kv_width != s.kv_width) bytes += 2 * s.tokens * s.repeated_kv_width * s.c;
  return bytes;
}

}  // namespace

// Plain layer: its backward peaks either at the start (the MLP: everything saved, plus the gradient into
// down_proj's input and the two the SwiGLU product returns, [tokens, intermediate] each) or at the attention core's
// backward (attention_phase).
LayerFootprint plain_layer_footprint(const models::LlamaConfig& config, const ActivationShape& shape) {
  const Sizes s = sizes_of(config, shape);
  LayerFootprint layer;
  layer.saved = estimate_layer_activation_bytes(config, shape);
  const int64_t mlp_phase = layer.saved + gradients_in_flight(s) + 3 * s.tokens * s.intermediate * s.c;
  const int64_t mlp_half =
      mlp_half_saved(s, s.swiglu_tensors, mlp_norms_saved(s, rms_norm_saved(s), sandwich_norm_saved(s)));
  layer.backward_peak = std::max(mlp_phase, attention_phase(s, layer.saved - mlp_half));
  return layer;
}

// Selective layer (blocks run plainly; norms and the SwiGLU product are region checkpoints keeping their inputs,
// the attention core as shape.attention_core says: on the CPU the recomputing one, nn/attention_core.cpp).
LayerFootprint selective_layer_footprint(const models::LlamaConfig& config, const ActivationShape& shape) {
  const Sizes s = sizes_of(config, shape);
  LayerFootprint layer;
  // The two norms keep only their fp32 inputs; their outputs as the projections' inputs as in a plain layer.
  layer.saved = 2 * s.tokens * s.hidden * s.residual + base_inputs_from_norm(s, 3) + base_inputs_from_norm(s, 2);
  // Gemma 2's post-attention and post-feedforward norm regions keep their inputs, o_proj's and down_proj's
  // compute-dtype outputs (their outputs go to residual adds, which keep nothing).
  if (s.sandwich_norms) layer.saved += 2 * s.tokens * s.hidden * s.c;
  // Qwen3's query/key norm regions keep their inputs, the q and k projections' outputs.
  if (s.qk_norm) layer.saved += s.tokens * (s.q_width + s.kv_width) * s.c;
  if (s.low_precision) layer.saved += 4 * s.tokens * s.head_dim * s.c;  // RoPE's cos/sin casts
  layer.saved += attention_core_saved(s);
  // The SwiGLU region keeps gate and up; down_proj keeps the product.
  layer.saved += 2 * s.tokens * s.intermediate * s.c + base_input(s, s.intermediate);
  layer.saved += weight_copies(s) + lora_saved(s);
  // MLP phase: the SwiGLU region's backward (the product's gradient, silu recomputed, the gate's and up's
  // gradients). Counted as 4 [tokens, intermediate] tensors: about 3.3 were measured on LibTorch 2.13 where this
  // phase is the layer's peak (fused attention core, 1024 tokens; tests/recipes/test_checkpointing_memory.cpp).
  const int64_t mlp_phase = layer.saved + gradients_in_flight(s) + 4 * s.tokens * s.intermediate * s.c;
  const int64_t mlp_half =
      mlp_half_saved(s, 2, mlp_norms_saved(s, s.tokens * s.hidden * s.residual, s.tokens * s.hidden * s.c));
  layer.backward_peak = std::max(mlp_phase, attention_phase(s, layer.saved - mlp_half));
  return layer;
}

namespace {

// Final norm, lm_head and the loss at their peak, the end of forward (train/loss.cpp runs inside the step's
// forward): the final RMSNorm's saved tensors, lm_head's input copy and weight copy, the fp32 logits the model
// returns, then in the loss the contiguous fp32 copy of the shifted logits and log_softmax's output (saved for its
// backward). Under autocast lm_head's compute-dtype logits are gone by then: the model's .to(float32) saves
// nothing, so they are freed when forward returns (6 bytes per logit at that moment, under the 12 here; measured
// at a 32k vocabulary by tests/cli/plan_tests.sh). The loss's backward needs no more than this: the
// log-probabilities plus two [tokens, vocab] fp32 gradients.
int64_t head_peak(const models::LlamaConfig& config, const Sizes& s) {
  const int64_t vocab = config.vocab_size;
  int64_t bytes = rms_norm_saved(s) + norm_output_for_matmuls(s, 1);
  if (s.low_precision && !s.base_weights_in_compute_dtype) bytes += vocab * s.hidden * s.c;  // lm_head copy
  if (s.head_chunk_rows > 0) {
    // Chunked per-sequence log-probs (train/sequence_logps.cpp): one chunk's fp32 logits at a time (the product's
    // compute-dtype output is freed as it is widened) and logsumexp's fp32 temporary; in backward the softmax is
    // made in place and the gradient's compute-dtype copy is smaller than that temporary. Backward also builds the
    // hidden states' fp32 gradient whole. Every position counts as scored: an upper bound by the prompts' share.
    const int64_t rows = std::min(s.head_chunk_rows, s.tokens);
    bytes += rows * vocab * 2 * kFloat32 + s.tokens * s.hidden * s.residual;
    if (s.softcapped_logits) bytes += rows * vocab * kFloat32;
    return bytes;
  }
  bytes += 3 * s.tokens * vocab * kFloat32;  // fp32 logits, shifted fp32 copy, log-probabilities
  // Gemma 2's final soft cap keeps tanh's fp32 output for its backward.
  if (s.softcapped_logits) bytes += s.tokens * vocab * kFloat32;
  return bytes;
}

}  // namespace

int64_t estimate_layer_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape) {
  const Sizes s = sizes_of(config, shape);
  // input_layernorm and post_attention_layernorm; the first one's input is the layer's fp32 input (the residual
  // stream stays fp32: fp32 + compute-dtype sums promote), the second's is the residual after attention.
  int64_t bytes = 2 * rms_norm_saved(s) + qk_norm_saved(s);
  // Gemma 2's post-attention (on o_proj's output) and post-feedforward norms save what any RMSNorm does (the
  // zero-centred form keeps the same tensors: fp32 input, normalised tensor, rsqrt); their outputs only join the
  // residual stream.
  if (s.sandwich_norms) bytes += 2 * sandwich_norm_saved(s);
  // Their outputs as matmul inputs: q, k, v read the first; gate and up read the second.
  bytes += base_inputs_from_norm(s, 3) + base_inputs_from_norm(s, 2);
  // RoPE multiplies by cos and sin cast to the compute dtype, once each for q and for k; the products keep the
  // casts. (q and k themselves are not kept: cos and sin need no gradient.) fp32 uses the shared tables.
  if (s.low_precision) bytes += 4 * s.tokens * s.head_dim * s.c;
  bytes += attention_core_saved(s);
  // SwiGLU: gate output (silu's input), silu output and up output (the product's inputs; nn/swiglu_cpu's kernel
  // keeps gate and up alone), and the product (down_proj's input).
  bytes += s.swiglu_tensors * s.tokens * s.intermediate * s.c + base_input(s, s.intermediate);
  bytes += weight_copies(s) + lora_saved(s);
  return bytes;
}

int64_t estimate_layer_working_set_bytes(const models::LlamaConfig& config, const ActivationShape& shape) {
  return plain_layer_footprint(config, shape).backward_peak;
}

StackMemory llama_stack(const models::LlamaConfig& config, const ActivationShape& shape, bool selective) {
  const Sizes s = sizes_of(config, shape);
  StackMemory stack;
  const LayerFootprint layer =
      selective ? selective_layer_footprint(config, shape) : plain_layer_footprint(config, shape);
  stack.blocks.assign(static_cast<size_t>(config.num_hidden_layers), layer);
  stack.block_input = s.tokens * s.hidden * s.residual;  // a checkpointed layer keeps only its input
  stack.block_output = stack.block_input;
  stack.head_peak = head_peak(config, s);
  // One mask per distinct window among the layers (models/llama.cpp builds them once per forward): Gemma 2's
  // alternating sliding and full layers have two.
  std::set<int64_t> windows;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) windows.insert(config.layer_sliding_window(i));
  stack.alive_throughout = mask_bytes(s) * static_cast<int64_t>(std::max<size_t>(1, windows.size()));
  return stack;
}

RunnerStacks llama_stacks(const models::LlamaConfig& config, const ActivationShape& shape, c10::DeviceType device,
                          c10::ScalarType compute_dtype) {
  auto stack_of = [&](const ActivationShape& each, bool selective) { return llama_stack(config, each, selective); };
  return stacks_with_attention_cores(shape, device, compute_dtype, stack_of, config.attn_logit_softcapping > 0);
}

}  // namespace tune::recipes::sft
