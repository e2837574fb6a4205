// The stack-level activation estimate shared by the recipes' memory plans.
#include "tune/recipes/activation_estimate.h"

#include <algorithm>

#include "tune/core/cpu_gemm_mode.h"

namespace tune::recipes {
namespace {

const BlockFootprint& recomputed_block(const StackMemory& stack, size_t i) {
  return stack.recomputed_blocks.empty() ? stack.blocks[i] : stack.recomputed_blocks[i];
}

}  // namespace

StackPhases stack_phases(const StackMemory& stack, const std::vector<bool>& checkpointed) {
  int64_t kept_before = 0;  // by blocks 0 .. i-1
  int64_t backward_peak = 0;
  const auto blocks = static_cast<int64_t>(stack.blocks.size());
  for (size_t i = 0; i < stack.blocks.size(); ++i) {
    const bool is_checkpointed = i < checkpointed.size() && checkpointed[i];
    const int64_t recomputed_output = is_checkpointed ? stack.block_output : 0;
    const int64_t gradients = (blocks - static_cast<int64_t>(i)) * stack.gradient_per_block;  // blocks i .. L-1
    const BlockFootprint& block = is_checkpointed ? recomputed_block(stack, i) : stack.blocks[i];
    backward_peak = std::max(backward_peak, kept_before + block.backward_peak + recomputed_output + gradients);
    kept_before += is_checkpointed ? stack.block_input : stack.blocks[i].saved;
  }
  return {stack.alive_throughout + kept_before + stack.head_peak, stack.alive_throughout + backward_peak};
}

int64_t estimate_stack_bytes(const StackMemory& stack, const std::vector<bool>& checkpointed) {
  return stack_phases(stack, checkpointed).peak();
}

int64_t estimate_segmented_stack_bytes(const StackMemory& stack, int64_t segment_size) {
  return segmented_stack_phases(stack, segment_size).peak();
}

StackPhases segmented_stack_phases(const StackMemory& stack, int64_t segment_size) {
  const auto blocks = static_cast<int64_t>(stack.blocks.size());
  segment_size = std::max<int64_t>(1, segment_size);
  const int64_t segments = (blocks + segment_size - 1) / segment_size;
  int64_t backward_peak = 0;
  for (int64_t j = 0; j < segments; ++j) {
    // The segment's recompute rebuilds every block's saved set; block k's backward then runs beside the blocks of
    // the segment before it (those after it are done).
    int64_t before = j * stack.block_input + stack.block_output;
    const int64_t end = std::min(blocks, (j + 1) * segment_size);
    for (int64_t k = j * segment_size; k < end; ++k) {
      // The segment's last block runs as a checkpointed block's recompute; the others keep their graphs while the
      // later ones are differentiated, so they take the forms of plainly run blocks (nn::SegmentBlockScope).
      const BlockFootprint& block =
          k + 1 < end ? stack.blocks[static_cast<size_t>(k)] : recomputed_block(stack, static_cast<size_t>(k));
      backward_peak = std::max(backward_peak, before + block.backward_peak + (blocks - k) * stack.gradient_per_block);
      before += block.saved;
    }
  }
  return {stack.alive_throughout + segments * stack.block_input + stack.head_peak, stack.alive_throughout + backward_peak};
}

std::vector<bool> last_blocks_checkpointed(int64_t blocks, int64_t count) {
  count = std::clamp<int64_t>(count, 0, blocks);
  std::vector<bool> checkpointed(static_cast<size_t>(blocks), false);
  for (int64_t i = blocks - count; i < blocks; ++i) checkpointed[static_cast<size_t>(i)] = true;
  return checkpointed;
}

int64_t estimate_for_runner(const StackMemory& plain, const StackMemory& selective,
                            const memory::CheckpointRunner& runner) {
  return phases_for_runner(plain, selective, runner).peak();
}

StackPhases phases_for_runner(const StackMemory& plain, const StackMemory& selective,
                              const memory::CheckpointRunner& runner) {
  switch (runner.policy()) {
    case memory::Policy::sqrt:
      return segmented_stack_phases(plain, runner.segment_size());
    case memory::Policy::selective:
      return stack_phases(selective, {});
    default: {
      std::vector<bool> layout;
      for (size_t i = 0; i < plain.blocks.size(); ++i) layout.push_back(runner.is_checkpointed(static_cast<int64_t>(i)));
      return stack_phases(plain, layout);
    }
  }
}

BlockFootprint footprint_of_parts(const std::vector<BlockPart>& parts, int64_t in_flight) {
  BlockFootprint block;
  for (const BlockPart& part : parts) block.saved += part.saved;
  int64_t before = 0;
  for (const BlockPart& part : parts) {
    before += part.saved;
    block.backward_peak = std::max(block.backward_peak, before + in_flight + part.backward);
  }
  return block;
}

int64_t cpu_gemm_workspace(int64_t rows, int64_t inner, int64_t columns) {
  constexpr int64_t kFloat32 = 4;
  const int64_t chunk = std::min(rows, std::max<int64_t>(64, (int64_t{1} << 16) / columns));
  return (chunk * (inner + columns) + inner * columns) * kFloat32;
}

bool products_accumulate_in_fp32(c10::DeviceType device, c10::ScalarType dtype) {
  const bool low_precision = dtype == c10::ScalarType::BFloat16 || dtype == c10::ScalarType::Half;
  return device == c10::DeviceType::CPU && low_precision && cpu_gemm_mode_for(dtype) == CpuGemmMode::fp32_accumulate;
}

BlockPart modulated_norm_part(int64_t tokens, int64_t hidden, bool selective) {
  constexpr int64_t kFloat32 = 4;
  const int64_t elements = tokens * hidden;
  const int64_t statistics = 2 * tokens * kFloat32;
  return {elements * kFloat32 + (selective ? 0 : statistics),
          3 * elements * kFloat32 + (selective ? elements * kFloat32 + statistics : 0)};
}

}  // namespace tune::recipes
