// The attention core shared by the Llama and Latte blocks: softmax(q k^T * scale + mask) v after the projections,
// in two autograd forms with the same forward values: the plain one (autograd keeps the probabilities) and one
// whose backward recomputes the probabilities from q and k (what a layer whose graph lives until backward takes:
// attention_core_form below).
#pragma once

#include <torch/types.h>

namespace tune::nn {

class BlockRunner;

// query [B, H, T, D]; key and value [B, KVH, S, D] with H a multiple of KVH (grouped-query attention: key/value
// head j serves query heads j*H/KVH .. (j+1)*H/KVH - 1); mask additive, broadcastable to [B, H, T, S], or
// undefined. Returns the context [B, H, T, D] in query's dtype. The matmuls run in query's dtype (bf16 under
// autocast); the mask addition and softmax in fp32 (or wider: a float64 model stays float64), because exp() of
// low-precision scores loses the small probabilities. softcap > 0 (Gemma 2's attn_logit_softcapping): the scaled
// scores s become softcap * tanh(s / softcap) before the mask is added; 0: none.
torch::Tensor attention_core(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                             const torch::Tensor& mask, double scale, double softcap = 0.0);

// Same forward values, but autograd keeps only query, key, value and the mask. Backward recomputes the scores and
// probabilities from them and never the value product, which backward does not need: FlashAttention's backward,
// tiled only over queries. Both passes go through the queries in chunks (recompute_chunk_rows below), each against
// the keys its rows can see, so a causal mask's hidden half is never computed and the [B, H, T, S] temporaries shrink
// to a chunk's. With a single chunk (short T, or no mask) forward runs exactly attention_core's ops; with several,
// the values agree to rounding. It trades one [B, H, T, S] matmul and softmax in backward for not keeping the fp32
// probabilities and their low-precision copy (6 bytes per score under bf16) from forward to backward. No double
// backward. softcap as attention_core's; backward differentiates through it.
torch::Tensor attention_core_recomputing_probabilities(const torch::Tensor& query, const torch::Tensor& key,
                                                       const torch::Tensor& value, const torch::Tensor& mask,
                                                       double scale, double softcap = 0.0);

// Query rows per chunk of the recomputing core for `queries` rows under a mask: a quarter of them, at least
// core/cpu_gemm_mode.h's attention_chunk_min_rows() (512 unless this process measured or was told another), at most
// all. The activation estimates size the core's backward by it.
int64_t recompute_chunk_rows(int64_t queries);

// Batch entries per chunk of the recomputing core, forward and backward, for `heads` x `rows` x `keys` scores an
// entry (rows: the widest query chunk): as many as keep a chunk's scores within kRecomputeChunkScores (at least one),
// spread evenly over the chunks. Its backward holds a few tensors of a chunk's scores at once (8 bytes per score in
// bf16 on the CPU), so a batch of many short sequences (Latte's frames: 16 x 6 heads x 256 x 256 scores) no longer
// holds all of them at once; matmuls over fewer entries of the same shapes lose nothing. The estimates size the
// backward by it.
constexpr int64_t kRecomputeChunkScores = int64_t{2} << 20;
int64_t recompute_chunk_batch(int64_t batch, int64_t heads, int64_t rows, int64_t keys);
// The share of the batch entries one such chunk holds (1 for a single chunk).
inline double recompute_chunk_batch_share(int64_t batch, int64_t heads, int64_t rows, int64_t keys) {
  return batch <= 0 ? 1.0
                    : static_cast<double>(recompute_chunk_batch(batch, heads, rows, keys)) / static_cast<double>(batch);
}

// LibTorch's fused scaled_dot_product_attention (on CUDA: FlashAttention-2 for bf16/fp16 without an explicit
// mask, the memory-efficient kernel with one), the same values to rounding. Autograd keeps q, k, v, the output and
// a log-sum-exp per row; backward recomputes the probabilities tile by tile. `causal`: `mask` is exactly the
// causal mask of T == S tokens (no cache, no packing), so it is dropped for is_causal and the flash kernel can run.
torch::Tensor attention_core_fused(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                   const torch::Tensor& mask, double scale, bool causal = false);

// Whether the fused form is the core for inputs of this dtype on this device, `recomputing` when selective
// checkpointing asks for the attention core's recompute. CUDA: always. CPU: never for selective's core (tune's
// chunked recompute skips the keys a packing mask hides, and was measured faster than LibTorch's CPU kernel under
// such masks); otherwise: fp32 always (measured faster and leaner, docs/BENCHMARKS.md, attention table); bf16/fp16
// as the run measured at its start (recipes/cpu_kernel_choice.h: LibTorch's fused kernel against tune's core in the
// form the run takes), or before any measurement where LibTorch's CPU kernels for the dtype are vectorised
// (core/cpu_gemm_mode.h: libtorch_cpu_kernels_native; where it has only a reference loop its fused kernel was 2-3x
// slower than tune's core); never float64, which tune uses to check the maths and which keeps the textbook formula.
// TUNE_CPU_ATTENTION=fused|plain overrides the choice on the CPU (for side-by-side benchmarks; `plain` means tune's
// core, in whichever of its two forms the call takes).
// `softcapped` (Gemma 2's soft-capped scores): never, on any device, since the fused kernels cannot apply the cap.
bool uses_fused_attention(c10::DeviceType device, c10::ScalarType dtype, bool recomputing = false,
                          bool softcapped = false);

// The three forms run_attention_core chooses between.
enum class AttentionCoreForm {
  plain,        // attention_core: autograd keeps the probabilities (a core whose graph dies young or never exists)
  recomputing,  // attention_core_recomputing_probabilities: keeps q, k, v
  fused,        // attention_core_fused: LibTorch's kernel
};

// Which form run_attention_core takes, and so what the activation estimates count. Where tune's core runs (not
// fused), it recomputes its probabilities in backward whenever autograd would otherwise keep them from the block's
// forward to its backward: `kept_until_backward` (nn::graph_kept_until_backward: grad mode on outside a checkpointed
// block's recompute, i.e. a plainly run block or selective checkpointing's, `selective`, or inside a multi-block
// segment's recompute before its last block, whose graph outlives its own backward). The probabilities cost 6 bytes per score under bf16
// (batch 4 x 4 heads x 512 x 512 scores a layer of the Llama benchmark: 24 MiB) against one more q k^T and softmax in backward
// (measured: the same step time, docs/BENCHMARKS.md). Without gradients the plain form; inside a checkpointed block's
// recompute (its graph lives only through that block's backward, one block at a time) the plain form too unless
// measured otherwise (`in_block_recompute` below).
// (Measured on the AVX512-BF16 EPYC, docs/BENCHMARKS.md: the recompute costs ~14% of the Llama benchmark's step
// under policy off there, against the 24 MiB a layer.)
// Whether the recomputing core's backward takes the fused softmax backward (nn/softmax_bf16.h: probabilities and
// the scores' gradient in one pass, 8 bytes per score at its peak instead of 12): bf16 on the CPU without a soft
// cap, unless TUNE_CPU_SOFTMAX=libtorch. The activation estimates ask it.
bool recomputing_core_fuses_softmax_backward(c10::DeviceType device, c10::ScalarType dtype, bool softcapped);

// `in_block_recompute`: grad mode on inside a checkpointed block's recompute (not kept until backward): there the
// plain form, unless this process measured the recomputing one at least as fast on its run's shapes for a bf16/fp16
// CPU run (core/cpu_gemm_mode.h: measured_recompute_core_recomputes; recipes/cpu_kernel_choice.h). Its fused softmax
// backward can outrun the plain core's autograd softmax even with the extra product (Latte-S/2's spatial blocks:
// 1.37 s a step at policy full against 1.45 s, and 32 MiB less at the peak), or lose to it where attention is a
// larger share of the work (the 8-layer Llama benchmark, 512 tokens: 20% slower).
AttentionCoreForm attention_core_form(c10::DeviceType device, c10::ScalarType dtype, bool kept_until_backward,
                                      bool selective = false, bool softcapped = false,
                                      bool in_block_recompute = false);

// What a block calls: the form attention_core_form gives for nn::graph_kept_until_backward (grad mode, the current
// recompute and segment, block_runner.h) and whether `runner` recomputes the attention core (selective
// checkpointing).
torch::Tensor run_attention_core(BlockRunner* runner, const torch::Tensor& query, const torch::Tensor& key,
                                 const torch::Tensor& value, const torch::Tensor& mask, double scale,
                                 bool causal = false, double softcap = 0.0);

}  // namespace tune::nn
