// Dropout whose mask depends on which global row of the step a row is, not on the process holding it.
//
// Data-parallel training splits each step's rows over processes. Dropout masks drawn from each process's default
// generator give the rows of a step other masks than one process would (every rank draws the same pattern for its own
// rows), so an N-process run is not the one-process run once dropout is on. A recipe sets a RowKeyScope around a
// micro-batch's forward and backward (its seed, step, micro-batch and the global index of this process's first row);
// row_keyed_dropout then draws row r's mask from a generator seeded by (seed, step, micro-batch, first + r, stream),
// where `stream` tells the layers apart. Keyed draws need no RNG-state restore: a checkpoint's recompute draws the
// same masks. The scope is process-wide rather than thread-local: backward (and a recompute in it) may run on
// autograd's device threads.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace tune::nn {

struct RowKey {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t micro_batch = 0;
  int64_t first_global_row = 0;  // global index (within the micro-batch) of this process's row 0
};

class RowKeyScope {
 public:
  explicit RowKeyScope(const RowKey& key);
  ~RowKeyScope();
  RowKeyScope(const RowKeyScope&) = delete;
  RowKeyScope& operator=(const RowKeyScope&) = delete;

 private:
  std::optional<RowKey> previous_;
};

std::optional<RowKey> current_row_key();

// A new stream id for a layer that draws row-keyed masks: layers built in the same order get the same ids in every
// process of a run.
uint64_t next_dropout_stream();

// Inverted dropout of x ([rows, ...]) with probability p: inside a RowKeyScope each row's mask comes from its key;
// outside one, torch::dropout with the default generator. `train` false (or p == 0): x unchanged.
torch::Tensor row_keyed_dropout(const torch::Tensor& x, double p, bool train, uint64_t stream);

}  // namespace tune::nn
