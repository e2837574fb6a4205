// What a recipe needs from distributed training, whatever runs underneath: its rank's rows of each global batch,
// when a backward pass communicates, gradients summed over ranks, and sums of scalars (loss, eval tokens). In a
// single-process run every call is a no-op and shares are whole batches, so recipes have one code path.
//
// Strategy `ddp`: parameters replicated (broadcast from rank 0 at start), gradients bucketed and all-reduced while
// backward runs (distributed/gradient_reducer.h). Because every rank holds identical parameters, optimizer state and
// EMA, rank 0 alone writes checkpoints and every rank reads the same one on resume.
//
// Strategy `shard_grad_op` (ZeRO-2): parameters (and EMA) replicated as under ddp; each rank owns a contiguous,
// byte-balanced share of the trainable parameters (distributed/parameter_partition.h) and keeps only their
// gradients (the others are released once reduced) and optimizer state, steps its optimizer on them, and sends the
// updated values to every other rank. The gradient norm for clipping and the inf/NaN decision are summed over ranks.
// Checkpoints hold one optimizer file per rank (optimizer.rank-R-of-N.safetensors, named per parameter), which any
// world size reads back exactly. What is not sharded yet: gradients during backward (they are all-reduced in
// buckets, as ddp does, and released afterwards; a reduce-scatter would halve the traffic).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/train/adamw.h"

namespace tune::distributed {
class GradientReducer;
}

namespace tune::recipes {

struct DistributedSettings {
  std::string backend = "gloo";     // resolved from distributed.backend (auto -> gloo)
  std::string strategy = "ddp";
  int64_t bucket_bytes = 25 * 1024 * 1024;
  bool reduce_bf16 = false;         // distributed.reduce_dtype: bf16
  int64_t timeout_s = 300;
};

DistributedSettings read_distributed_settings(const config::Config& config);

// When a launcher's environment (torchrun, srun, --nproc) says this process is one of several: joins the process
// group (rendezvous) and makes log lines of ranks other than 0 prefixed and quiet. Single process: nothing.
void join_distributed_run(const config::Config& config);

// Intra-op threads for this process: `requested` if set, else the machine's cores divided among the processes
// of this machine (two processes each using every core would fight over them).
int threads_for_this_rank(int requested);

// Runs `action` on rank 0 alone (writing the run directory) while the other ranks wait; if it fails, every rank
// fails with rank 0's exit code, the others saying that rank 0 failed, so no rank waits for a collective timeout.
void run_on_main_rank(const std::function<void()>& action, const std::string& what);

struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

class DataParallel {
 public:
  // `trainable`: the parameters whose gradients are reduced (LoRA: adapters only). `everything`: every parameter
  // and buffer, broadcast from rank 0 so all ranks start identical even if initialisation differed.
  DataParallel(const config::Config& config, const std::vector<torch::Tensor>& everything,
               const std::vector<torch::Tensor>& trainable);
  ~DataParallel();

  bool active() const { return size_ > 1; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // This rank's contiguous share of `rows` rows (balanced; may be empty when rows < size).
  RowRange share(int64_t rows) const;
  // Before each backward: whether it is the step's last (gradients are reduced) or an earlier micro-batch.
  void before_backward(bool last_of_step);
  // After the step's last backward: every trainable gradient is now the sum over ranks.
  void finish_gradients();
  // The sum over ranks (identity in a single process).
  double sum(double value) const;

  // Whether each rank holds only a share of the optimizer state (shard_grad_op with more than one process).
  bool shards_optimizer_state() const { return !owner_.empty(); }
  // The parameters this rank's optimizer updates: `params` itself unless the optimizer state is sharded.
  std::vector<train::NamedParameter> optimizer_share(const std::vector<train::NamedParameter>& params) const;
  // For train::finish_step: sums a squared gradient norm over ranks when gradients are sharded; empty otherwise.
  std::function<double(double)> gradient_norm_sum() const;
  // After the optimizer step (`applied`: it updated the parameters): under shard_grad_op every rank sends its share
  // of the trainable parameters to the others, so all hold the same values again.
  void after_update(bool applied);
  // One line for the run log: world size, strategy, buckets, bytes per step.
  std::string describe() const;

 private:
  int rank_ = 0;
  int size_ = 1;
  DistributedSettings settings_;
  std::unique_ptr<distributed::GradientReducer> reducer_;
  std::vector<torch::Tensor> trainable_;
  std::vector<int> owner_;  // rank that updates trainable_[i]; empty unless the optimizer state is sharded
};

}  // namespace tune::recipes
