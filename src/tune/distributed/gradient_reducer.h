// Data-parallel gradient reduction (strategy `ddp`), in the manner of PyTorch DDP's reducer: trainable parameters
// are grouped into buckets of about `bucket_bytes` in reverse registration order (roughly the order backward
// produces their gradients); a hook after each parameter's gradient accumulation marks it ready, and a bucket whose
// gradients are all ready is flattened and all-reduced asynchronously while backward goes on computing earlier
// layers. finish() waits for the reductions and writes the sums back into the gradients.
//
// Semantics the recipes rely on:
// - Gradients are SUMMED over ranks: each rank's loss must be its share of the global loss (the SFT recipe divides
//   by the global token count, Latte by the global sample count), so N ranks x batch b equals 1 rank x batch N*b.
// - set_sync(false) for the non-final micro-batches of gradient accumulation: gradients accumulate locally and
//   nothing is sent; only the final backward of a step communicates.
// - Buckets are launched in index order on every rank (a Gloo collective is matched by order), whatever order the
//   gradients arrive in; a parameter that got no gradient this step counts as zero (identically on every rank).
// - With `owner` set (strategy shard_grad_op, ZeRO-2), each run of a bucket's parameters is reduced (c10d reduce)
//   to the rank that owns them instead of all-reduced, and a rank lets go of the gradients it does not own as soon
//   as their bucket leaves: after finish() only owned parameters have a .grad.
// - At most two buckets are in flight: launching one first waits for the one before the last and writes its sums
//   back, so the reduction buffers stay two buckets however large the model.
// - Activation checkpointing hands each parameter's gradient to autograd exactly once (memory/checkpoint.h), so a
//   recompute never marks a parameter ready twice; if it did, finish() would fail loudly instead of double-counting.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tune/distributed/process_group.h"

namespace tune::distributed {

struct ReducerOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;
  torch::ScalarType reduce_dtype = torch::kFloat32;  // kFloat32 or kBFloat16 (halves the bytes sent)
  std::vector<int> owner;  // shard_grad_op: the rank that keeps each parameter's gradient; empty: every rank (ddp)
};

class GradientReducer {
 public:
  GradientReducer(ProcessGroup& group, const std::vector<torch::Tensor>& params, const ReducerOptions& options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Whether the coming backward is the step's last (communicates) or an earlier micro-batch (accumulates only).
  void set_sync(bool sync);
  // After the last backward of a step: launches buckets whose gradients never arrived, waits for every reduction
  // and stores the sums in the parameters' .grad.
  void finish();

  int64_t bucket_count() const;
  int64_t bytes_per_step() const;  // all-reduced per synchronised step (in the reduce dtype)

  struct State;  // shared with the gradient hooks

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tune::distributed
