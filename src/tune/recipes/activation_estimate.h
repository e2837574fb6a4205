// Activation memory of one forward + backward through a stack of blocks, from what each block keeps: the shape of
// the estimate every recipe's memory plan prints (recipes/sft/memory_report, recipes/latte/latte_memory_report
// supply the per-block figures for their models).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "tune/memory/checkpoint.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/frame_attention.h"
#include "tune/nn/rms_norm_cpu.h"
#include "tune/nn/swiglu_cpu.h"

namespace tune::recipes {

// What one block holds: its saved set from forward to backward, and the most it holds at once during its own
// backward (saved set included).
struct BlockFootprint {
  int64_t saved = 0;
  int64_t backward_peak = 0;
};

// One part of a DiT-style block in forward order (a norm, an attention, a feed-forward): what it keeps from forward
// to backward, and how far above that (and above everything the parts before it keep) its own backward goes.
struct BlockPart {
  int64_t saved = 0;
  int64_t backward = 0;
};

// Backward runs the parts in reverse, each freeing what it kept, so part k's backward meets parts 0 .. k whole:
// the block's footprint, with `in_flight` held through the whole backward (the gradients of its output).
BlockFootprint footprint_of_parts(const std::vector<BlockPart>& parts, int64_t in_flight);

// The fp32 workspace of precision/cpu_gemm.h's fp32-accumulate product of a [rows, inner] compute-dtype matrix by an
// [inner, columns] one (bf16/fp16 matmuls on CPUs without native kernels for them, which tune's CPU runs take): a
// block of the result's rows and of the left operand's converted to fp32, and the right operand converted whole.
// A constant of about 1.3 MB at Latte-1's width, it shows only at test sizes. Only where
// products_accumulate_in_fp32: CUDA and LibTorch's own CPU kernels have none.
int64_t cpu_gemm_workspace(int64_t rows, int64_t inner, int64_t columns);

// Whether `dtype` products on `device` take the fp32-accumulate kernels (a bf16/fp16 product on the CPU in the mode
// core/cpu_gemm_mode.h gives: TUNE_CPU_GEMM, else the run's measured choice, else the CPU's features).
bool products_accumulate_in_fp32(c10::DeviceType device, c10::ScalarType dtype);

// A modulated LayerNorm over `tokens` rows of `hidden` (nn::run_modulated_layer_norm): nn::modulated_layer_norm keeps
// its fp32 input and an fp32 mean and 1/std per token; selective checkpointing keeps the input alone. Backward: the
// incoming fp32 gradient, the normalised input rebuilt for the scale's gradient with its product by the gradient,
// three [tokens, hidden] fp32 tensors; selective first recomputes the norm's output, a fourth, and its statistics.
BlockPart modulated_norm_part(int64_t tokens, int64_t hidden, bool selective);

struct StackMemory {
  std::vector<BlockFootprint> blocks;  // in forward order, each as it runs when not checkpointed
  // The same blocks as a checkpointed block's (or segment's) recompute runs them, where that differs: on the CPU
  // tune's attention core keeps its probabilities there (nn::attention_core_form). Empty: as `blocks`.
  std::vector<BlockFootprint> recomputed_blocks;
  int64_t block_input = 0;             // what a checkpointed block keeps until backward recomputes it
  int64_t block_output = 0;            // a recomputed block's (or segment's) output, held while its graph is
                                       // differentiated (the plain graph's output is gone by then)
  int64_t head_peak = 0;               // after the last block: head and loss at the end of forward
  int64_t alive_throughout = 0;        // built before the first block and freed after backward (an attention mask)
  // Parameter gradients each block's backward leaves behind, to be held until the optimizer step: set by callers
  // that want them in the backward phase (the planner, without accumulation: block i's backward then meets the
  // gradients of blocks i .. L-1); 0 for the activation estimate alone.
  int64_t gradient_per_block = 0;
};

// The two moments a stack's activation peak is the larger of (both include alive_throughout): the end of forward,
// and the worst block backward. Callers that add parameter gradients need them apart: without gradient
// accumulation no gradient exists yet at the end of forward (the memory budget planner, recipes/sft/sft_plan).
struct StackPhases {
  int64_t forward_end = 0;
  int64_t backward = 0;
  int64_t peak() const { return forward_end > backward ? forward_end : backward; }
};
StackPhases stack_phases(const StackMemory& stack, const std::vector<bool>& checkpointed);
StackPhases segmented_stack_phases(const StackMemory& stack, int64_t segment_size);
StackPhases phases_for_runner(const StackMemory& plain, const StackMemory& selective,
                              const memory::CheckpointRunner& runner);

// Peak with the given blocks checkpointed (one flag per block): the larger of the end of forward (what every block
// keeps, plus the head) and the backward of some block i (what blocks before i keep, plus block i's footprint,
// recomputed if checkpointed; everything after it and the head are freed by then).
int64_t estimate_stack_bytes(const StackMemory& stack, const std::vector<bool>& checkpointed);

// Policy sqrt: blocks checkpointed in segments of `segment_size` (one kept input per segment). Backward of a segment
// recomputes all of its blocks at once, so block k's backward meets the earlier segments' inputs and the saved sets
// of the blocks before it in its segment.
int64_t estimate_segmented_stack_bytes(const StackMemory& stack, int64_t segment_size);

// The last `count` blocks checkpointed: the layout whose recompute meets the most plain activations, an upper bound
// when only the number of checkpointed blocks is known.
std::vector<bool> last_blocks_checkpointed(int64_t blocks, int64_t count);

// The estimate for the policy `runner` applies: the layout for off/full/every_k/offload, segments for sqrt, and
// for selective the `selective` stack (its blocks run plainly with their reduced saved sets).
int64_t estimate_for_runner(const StackMemory& plain, const StackMemory& selective,
                            const memory::CheckpointRunner& runner);

// The two stacks phases_for_runner takes.
struct RunnerStacks {
  StackMemory plain;      // blocks run plainly (recomputed_blocks: as checkpointed blocks recompute them)
  StackMemory selective;  // blocks as selective checkpointing runs them
};

// The stacks for a family whose blocks use nn::run_attention_core: `shape` (with an `attention_core` form) gets the
// form the runs take on `device` for `compute_dtype` in plainly run blocks, in checkpointed blocks' recomputes and
// in selective's blocks (nn::attention_core_form), and `stack_of(shape, selective)` builds the family's StackMemory.
// A Shape with a `kept_until_backward` flag (its blocks take other forms too where their graphs live until backward,
// as Latte's fc2 recomputing GELU) gets it set likewise, and one with `fp32_accumulate_products` whether the products
// take the fp32-accumulate CPU kernels (products_accumulate_in_fp32).
template <typename Shape, typename StackOf>
RunnerStacks stacks_with_attention_cores(Shape shape, c10::DeviceType device, c10::ScalarType compute_dtype,
                                         const StackOf& stack_of, bool softcapped = false) {
  constexpr bool has_kept_flag = requires(Shape each) { each.kept_until_backward; };
  if constexpr (requires(Shape each) { each.fp32_accumulate_products; }) {
    shape.fp32_accumulate_products = products_accumulate_in_fp32(device, compute_dtype);
  }
  if constexpr (requires(Shape each) { each.fused_softmax_backward; }) {
    shape.fused_softmax_backward = nn::recomputing_core_fuses_softmax_backward(device, compute_dtype, softcapped);
  }
  if constexpr (requires(Shape each) { each.cpu_rms_norm_kernel; }) {
    shape.cpu_rms_norm_kernel = device == c10::DeviceType::CPU && nn::cpu_norm_kernels_enabled();
  }
  if constexpr (requires(Shape each) { each.cpu_frame_attention; }) {
    shape.cpu_frame_attention = device == c10::DeviceType::CPU && nn::frame_attention_enabled();
  }
  if constexpr (requires(Shape each) { each.cpu_swiglu_kernel; }) {
    shape.cpu_swiglu_kernel = device == c10::DeviceType::CPU && compute_dtype == c10::kBFloat16 &&
                              nn::swiglu_cpu_enabled();
  }
  RunnerStacks stacks;
  shape.attention_core = nn::attention_core_form(device, compute_dtype, /*kept_until_backward=*/true, false, softcapped);
  if constexpr (has_kept_flag) shape.kept_until_backward = true;
  stacks.plain = stack_of(shape, false);
  Shape recomputed = shape;
  recomputed.attention_core =
      nn::attention_core_form(device, compute_dtype, /*kept_until_backward=*/false, false, softcapped,
                              /*in_block_recompute=*/true);
  if constexpr (has_kept_flag) recomputed.kept_until_backward = false;
  if (has_kept_flag || recomputed.attention_core != shape.attention_core) {
    stacks.plain.recomputed_blocks = stack_of(recomputed, false).blocks;
  }
  shape.attention_core = nn::attention_core_form(device, compute_dtype, /*kept_until_backward=*/true, true, softcapped);
  stacks.selective = stack_of(shape, true);
  return stacks;
}

// phases_for_runner on stacks_with_attention_cores (the training planners add gradients to the backward phase).
template <typename Shape, typename StackOf>
StackPhases phases_with_attention_cores(Shape shape, c10::DeviceType device, c10::ScalarType compute_dtype,
                                        const memory::CheckpointRunner& runner, const StackOf& stack_of) {
  const RunnerStacks stacks = stacks_with_attention_cores(shape, device, compute_dtype, stack_of);
  return phases_for_runner(stacks.plain, stacks.selective, runner);
}

// estimate_for_runner on stacks_with_attention_cores.
template <typename Shape, typename StackOf>
int64_t estimate_with_attention_cores(Shape shape, c10::DeviceType device, c10::ScalarType compute_dtype,
                                      const memory::CheckpointRunner& runner, const StackOf& stack_of) {
  return phases_with_attention_cores(shape, device, compute_dtype, runner, stack_of).peak();
}

}  // namespace tune::recipes
