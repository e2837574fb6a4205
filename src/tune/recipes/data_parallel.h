// What a recipe needs from distributed training, whatever runs underneath: its rank's rows of each global batch,
// when a backward pass communicates, gradients summed over ranks, and sums of scalars (loss, eval tokens). In a
// single-process run every call is a no-op and shares are whole batches, so recipes have one code path.
//
// Strategy `ddp`: parameters replicated (broadcast from rank 0 at start), gradients bucketed and all-reduced while
// backward runs (distributed/gradient_reducer.h). Because every rank holds identical parameters, optimizer state and
// EMA, rank 0 alone writes checkpoints and every rank reads the same one on resume.
//
// Strategy `shard_grad_op` (ZeRO-2): parameters (and EMA) replicated as under ddp; each rank owns a contiguous,
// byte-balanced share of the trainable parameters (distributed/parameter_partition.h): the reducer reduces each
// bucket's runs of parameters to their owner (c10d reduce) while backward runs and the other ranks let go of those
// gradients as the bucket leaves; each rank keeps only its share's gradients and optimizer state, steps its
// optimizer on them, and sends the updated values to every other rank. The gradient norm for clipping and the
// inf/NaN decision are summed over ranks. Checkpoints hold one optimizer file per rank
// (optimizer.rank-R-of-N.safetensors, named per parameter), which any world size reads back exactly.
//
// Strategy `full_shard` (ZeRO-3 / FSDP; distributed/fully_sharded.h): every rank holds 1/N of each wrapped block's
// parameters (blocks of the types distributed.shard_blocks names) and of the rest of the model as one more unit,
// as flat shards; blocks are gathered around their forward, backward and recompute by the runner block_runner()
// returns, the rest by before_forward(). The optimizer (and Latte's EMA) work on the flat shards, so their state is
// 1/N too; gradients are reduce-scattered into the shards. Checkpoints gather every unit and stay whole Hugging
// Face files written by rank 0; optimizer state is one file per rank, named per flat parameter, re-sharded exactly
// on resume with another world size.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/train/adamw.h"

namespace tune::nn {
class BlockRunner;
}
namespace tune::distributed {
class GradientReducer;
class FullyShardedParameters;
}

namespace tune::recipes {

struct DistributedSettings {
  std::string backend = "gloo";     // resolved from distributed.backend (auto -> gloo)
  std::string strategy = "ddp";
  int64_t bucket_bytes = 25 * 1024 * 1024;
  bool reduce_bf16 = false;         // distributed.reduce_dtype: bf16
  std::vector<std::string> shard_blocks;  // full_shard: block types wrapped; empty = the model's defaults
  bool prefetch = false;                  // full_shard: start a block's gather one block early
  int64_t timeout_s = 300;
};

DistributedSettings read_distributed_settings(const config::Config& config);

// distributed.shard_blocks against the block types a model has (`known`), with the other config checks, before
// anything is written: a name the model lacks is a config error listing them. Checked with any strategy, so a typo
// surfaces before the run that would use it.
void validate_shard_blocks(const config::Config& config, const std::vector<std::string>& known);

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

// A model's repeated blocks, for full_shard to wrap: block i's module and type name (the names
// distributed.shard_blocks accepts), and which types are wrapped when the key is left empty.
struct ModelBlocks {
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  std::vector<std::string> types;
  std::vector<std::string> default_types;
  // The whole model's parameters, and frozen buffers that are weights in all but name (QLoRA's NF4 bytes and
  // statistics): full_shard shards every tensor listed, each with the block whose module holds it.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters;
  // Other names distributed.shard_blocks may use for a type (alias -> type), such as the official code's class name
  // for diffusers' (Sana: SanaMSBlock -> SanaTransformerBlock); wrapping follows the type they name.
  std::map<std::string, std::string> type_aliases;
};

class DataParallel {
 public:
  // `trainable`: the parameters whose gradients are reduced (LoRA: adapters only). `everything`: every parameter
  // and buffer, broadcast from rank 0 so all ranks start identical even if initialisation differed. `blocks`:
  // needed by full_shard (a config error names the block types when distributed.shard_blocks names another).
  DataParallel(const config::Config& config, const std::vector<torch::Tensor>& everything,
               const std::vector<torch::Tensor>& trainable, const ModelBlocks* blocks = nullptr);
  ~DataParallel();

  bool active() const { return size_ > 1; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // This rank's contiguous share of `rows` rows (balanced; may be empty when rows < size).
  RowRange share(int64_t rows) const;
  // This rank's share of a global micro-batch of `rows` rows, as a training step uses it: nullopt when the rank has
  // none and need not compute; under full_shard a rank without rows computes on row 0 (`dummy`: its loss is to be
  // multiplied by zero) so that it takes part in every gather and reduction.
  struct MicroBatchShare {
    RowRange rows;
    bool dummy = false;
  };
  std::optional<MicroBatchShare> micro_batch_share(int64_t rows) const;
  // Before each backward: whether it is the step's last (gradients are reduced) or an earlier micro-batch.
  void before_backward(bool last_of_step);
  // After the step's last backward: every trainable gradient is now the sum over ranks.
  void finish_gradients();
  // The sum over ranks (identity in a single process).
  double sum(double value) const;
  torch::Tensor sum(torch::Tensor values) const;  // a CPU tensor summed elementwise over ranks (a copy)

  // Whether each rank holds only a share of the optimizer state (shard_grad_op with more than one process).
  bool shards_optimizer_state() const { return !owner_.empty() || sharded_ != nullptr; }
  // The parameters this rank's optimizer updates: `params` itself unless the optimizer state is sharded.
  std::vector<train::NamedParameter> optimizer_share(const std::vector<train::NamedParameter>& params) const;
  // For train::finish_step: sums a squared gradient norm over ranks when gradients are sharded; empty otherwise.
  std::function<double(double)> gradient_norm_sum() const;
  // After the optimizer step (`applied`: it updated the parameters): under shard_grad_op every rank sends its share
  // of the trainable parameters to the others, so all hold the same values again.
  void after_update(bool applied);
  // One line for the run log: world size, strategy, buckets, bytes per step.
  std::string describe() const;

  // ---- full_shard (each is what single-process and ddp runs need when not sharded: the identity or nothing)
  bool fully_sharded() const { return sharded_ != nullptr; }
  // The runner to install in the model: `inner` with wrapped blocks gathered around their calls.
  std::shared_ptr<nn::BlockRunner> block_runner(std::shared_ptr<nn::BlockRunner> inner) const;
  // Before each forward: gathers the parameters outside the wrapped blocks. release_parameters() after a forward
  // without backward (evaluation).
  void before_forward();
  void release_parameters();
  // A rank with no rows of a batch must still run the forward and backward under full_shard (on a dummy row, its
  // loss times zero): every rank issues the same gathers.
  bool every_rank_computes() const { return fully_sharded(); }
  // The optimizer's parameter groups: make_param_groups over this rank's share (the flat shards under full_shard,
  // decayed when they hold matrices).
  std::vector<train::ParamGroup> optimizer_groups(const std::vector<train::NamedParameter>& params,
                                                  double weight_decay) const;
  // What this process holds of `whole` parameter bytes (all, or the trainable ones: gradients, EMA): `whole`, or its
  // flat shards' bytes under full_shard. For the memory plan the log and memory.json announce.
  int64_t bytes_per_process(int64_t whole, bool trainable_only) const;
  // Tensors whose .grad the step clips and checks (`params`, or the trainable flat shards).
  std::vector<torch::Tensor> gradient_tensors(const std::vector<torch::Tensor>& params) const;
  // What an EMA averages: `params`, or the trainable flat shards.
  std::vector<train::NamedParameter> ema_parameters(const std::vector<train::NamedParameter>& params) const;
  // Collective, on every rank: whole per-parameter tensors from flat-shard state (EMA), and back.
  std::vector<std::pair<std::string, torch::Tensor>> whole_state(
      const std::vector<std::pair<std::string, torch::Tensor>>& shard_state) const;
  std::vector<std::pair<std::string, torch::Tensor>> shard_state(
      const std::vector<std::pair<std::string, torch::Tensor>>& whole) const;
  // Collective: every parameter gathered (saving, loading), then released; after loading weights into the
  // gathered parameters, reshard_parameters() takes each rank's shard of them.
  void gather_parameters();
  void reshard_parameters();
  // Optimizer state of a checkpoint for this rank: flat-parameter shards of any world size re-sharded to this one.
  std::vector<std::pair<std::string, torch::Tensor>> read_sharded_optimizer_state(const std::filesystem::path& dir) const;

 private:
  // full_shard's parts (data_parallel_sharded.cpp).
  void check_shard_blocks(const config::Config& config, const ModelBlocks& blocks);
  void shard_model(const ModelBlocks& blocks);
  void finish_sharded_gradients();
  std::string describe_sharded() const;
  std::vector<train::NamedParameter> trainable_shards() const;  // named by flat parameter

  int rank_ = 0;
  int size_ = 1;
  DistributedSettings settings_;
  std::unique_ptr<distributed::GradientReducer> reducer_;
  std::vector<torch::Tensor> trainable_;
  std::vector<int> owner_;  // rank that updates trainable_[i]; empty unless the optimizer state is sharded
  std::unique_ptr<distributed::FullyShardedParameters> sharded_;
  std::vector<bool> wrapped_block_;  // full_shard: block i's type is in distributed.shard_blocks
};

}  // namespace tune::recipes
