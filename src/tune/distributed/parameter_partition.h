// Which rank updates which parameter under strategy `shard_grad_op` (ZeRO-2): every rank holds every parameter, but
// each keeps the gradients and optimizer state of its own share only, updates that share, and sends the updated
// values to the others. Shares are contiguous runs of the parameter list balanced by bytes, the same on every rank
// (they depend only on the sizes and the world size), as ZeRO partitions its flattened parameters; a parameter is
// never split, so a rank's optimizer state stays named per parameter and re-shards to any world size exactly.
#pragma once

#include <cstdint>
#include <vector>

namespace tune::distributed {

// owner[i] for parameters of `bytes[i]` bytes among `ranks` ranks: non-decreasing, each rank's total within the
// largest parameter of total / ranks. Ranks may own nothing when there are fewer parameters than ranks.
std::vector<int> partition_by_bytes(const std::vector<int64_t>& bytes, int ranks);

}  // namespace tune::distributed
