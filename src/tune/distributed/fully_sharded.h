// Strategy `full_shard` (ZeRO-3 / FSDP): every rank holds 1/N of each unit's parameters, gradients and (through
// the optimizer it gives the flat shards to) optimizer state. A unit is one wrapped block (its parameters grouped
// into flat parameters by dtype, trainability and matrix/vector, see flat_parameter.h) or the rest of the model
// (embeddings, output head, final norm: everything outside the wrapped blocks) as one more unit.
//
// When a block's parameters are there:
// - forward: its wrapper (the block runner wrap() returns, around the checkpointing runner) gathers them just
//   before the block runs and releases them right after;
// - backward without recompute: a hook on the block's output gathers them again before the block's backward nodes
//   run; with a recompute (checkpointed block), the recompute's call of the block gathers them;
// - after the block's backward (every trainable parameter's gradient accumulated and, when it needs one, the
//   block input's gradient computed, so no node of the block still reads them) its gradients are reduce-scattered
//   into the shards' .grad (at most one reduction in flight, overlapping the next block's backward) and the
//   parameters released.
// The rest unit is gathered by gather_rest() before a forward and released after backward or by release_all().
//
// With `prefetch` (distributed.prefetch, FSDP's forward_prefetch + backward_prefetch=BACKWARD_PRE), a block's
// gather is started asynchronously one block early: in forward when the block before it starts, in backward when
// the block after it completes; its compute then waits only for what the overlap did not hide. It costs up to one
// more block's parameters: while a block runs (forward, or backward with its full gradients), the next one to run
// is resident too. At most two block units are resident at once (the plan budgets two either way).
//
// Every collective is issued in the same order on every rank because every rank runs the same graph: a rank
// without rows must still run a forward and backward (on a dummy row with zero loss).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tune/distributed/flat_parameter.h"
#include "tune/distributed/process_group.h"
#include "tune/nn/block_runner.h"

namespace tune::distributed {

struct ShardUnitSpec {
  std::string name;                                           // "model.layers.3", "rest"
  std::vector<std::pair<std::string, torch::Tensor>> params;  // every parameter, frozen ones too
};

class FullyShardedParameters {
 public:
  // `blocks[i]`: block i's unit, or empty params when block i's type is not wrapped (its parameters are then
  // expected in `rest`). Parameters must hold identical values on every rank.
  FullyShardedParameters(ProcessGroup& group, const std::vector<ShardUnitSpec>& blocks, const ShardUnitSpec& rest,
                         torch::ScalarType reduce_dtype, bool prefetch = false);
  ~FullyShardedParameters();
  FullyShardedParameters(const FullyShardedParameters&) = delete;
  FullyShardedParameters& operator=(const FullyShardedParameters&) = delete;

  // The runner to install in the model: `inner` (the checkpointing runner) with each wrapped block's parameters
  // gathered around its calls.
  std::shared_ptr<nn::BlockRunner> wrap(std::shared_ptr<nn::BlockRunner> inner);

  void gather_rest();
  void gather_all();
  void release_all();
  // After a step's last backward: reduces what did not complete during backward (units whose gradients never all
  // arrived, identically on every rank), waits for every reduction and releases every unit.
  void finish_gradients();

  // Every flat parameter, units in order (blocks, then rest).
  std::vector<FlatParameter*> flat_parameters();
  // Bytes of this rank's shards, and of the largest unit when gathered (what a forward adds at most, per block).
  int64_t shard_bytes() const;
  int64_t largest_unit_bytes() const;
  // Units whose gather was started ahead of need (prefetched) so far.
  int64_t prefetched_units() const;

  struct State;  // shared with hooks and the runner

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tune::distributed
