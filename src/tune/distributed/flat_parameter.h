// One flat parameter of strategy `full_shard` (ZeRO-3; PyTorch FSDP's FlatParameter): tensors of one dtype
// concatenated in order, padded to a multiple of the world size and cut into equal shards. Each rank keeps only its
// shard (`shard()`, a leaf the optimizer updates; its .grad is this rank's slice of the gradient summed over ranks).
// The original parameters become views of one full buffer whose storage holds bytes only while gathered: release()
// frees them but keeps every tensor's shape, so module code, autograd graphs and views that refer to the parameters
// see the values again after the next gather(). Nothing may read a parameter while it is released.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tune/distributed/process_group.h"

namespace tune::distributed {

class FlatParameter {
 public:
  // `params` (same dtype and device, all trainable or all frozen) hold identical values on every rank. Afterwards
  // they are views of the full buffer, released.
  FlatParameter(std::string name, std::vector<std::pair<std::string, torch::Tensor>> params, ProcessGroup& group);
  FlatParameter(const FlatParameter&) = delete;
  FlatParameter& operator=(const FlatParameter&) = delete;

  const std::string& name() const { return name_; }
  bool trainable() const { return trainable_; }
  // Whether the parameters are matrices (weight decay applies) or vectors (norm weights, biases).
  bool matrices() const { return matrices_; }
  int64_t numel() const { return numel_; }              // of the real parameters, without padding
  int64_t shard_numel() const { return shard_numel_; }  // padded numel / world size
  int64_t bytes_per_element() const { return static_cast<int64_t>(shard_.element_size()); }
  torch::Tensor& shard() { return shard_; }

  // All-gathers the shards into the full buffer (no-op when gathered; waits for a gather start_gather() began);
  // release() frees it (after waiting for a gather in flight). start_gather() allocates the buffer and starts the
  // all-gather without waiting (a prefetch): nothing may read the parameters before gather() returns.
  void gather();
  void start_gather();
  void release();
  // Whether the buffer holds bytes: gathered, or its gather in flight.
  bool resident() const { return state_ != State::released; }

  // Flattens the parameters' gradients (zeros where none arrived), casts to `reduce_dtype` and starts their
  // reduce-scatter; the gradients are released. finish_reduction() waits and adds this rank's slice into
  // shard().grad (so micro-batches accumulate).
  void start_reduction(torch::ScalarType reduce_dtype);
  void finish_reduction();

  // The whole flat vector (numel()) of a shard-shaped tensor of any dtype (an EMA, an optimizer moment), gathered
  // from every rank; and this rank's padded slice of a whole flat vector (resume, re-sharding).
  torch::Tensor gather_whole(const torch::Tensor& shard_like);
  torch::Tensor slice_of(const torch::Tensor& whole) const;
  // A whole flat vector cut into the parameters' names and shapes (views).
  std::vector<std::pair<std::string, torch::Tensor>> split(const torch::Tensor& whole) const;
  // The parameters' current values flattened (they must be gathered): to re-shard after loading weights.
  torch::Tensor flatten_parameters() const;

 private:
  void set_storage_bytes(size_t bytes);

  std::string name_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  ProcessGroup& group_;
  bool trainable_ = false;
  bool matrices_ = false;
  int64_t numel_ = 0;
  int64_t shard_numel_ = 0;
  torch::Tensor full_;   // [shard_numel * world size]; its storage is empty while released
  torch::Tensor shard_;  // [shard_numel]
  enum class State { released, gathering, gathered };
  State state_ = State::gathered;
  torch::Tensor gather_input_;  // the shard, detached, while its all-gather is in flight
  PendingCollective gathering_;
  torch::Tensor reduce_input_, reduce_output_;
  PendingCollective reduction_;
};

}  // namespace tune::distributed
