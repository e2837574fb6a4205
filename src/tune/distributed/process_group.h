// The process group of a distributed run: c10d's TCPStore rendezvous and a Gloo (CPU tensors) or NCCL (CUDA
// tensors, built only against a CUDA LibTorch) backend, behind the few collectives the trainer needs. One per process, created once at the start of `tune train` when a launcher's
// environment says there is more than one process; everything else asks `world()`.
//
// Every collective is a c10d one (never a home-made transport) and has the run's timeout: a rank that died makes
// the others fail with an error that says so instead of waiting forever.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tune/distributed/launch_environment.h"

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace tune::distributed {

enum class ReduceOp { sum, max, min };

struct GroupOptions {
  std::string backend = "gloo";                // "gloo", or "nccl" where nccl_built()
  std::chrono::seconds timeout{300};           // every collective and the rendezvous
};

class ProcessGroup;

// A collective in flight. wait() rethrows a failure (timeout, peer gone) as tune::Error naming the operation.
class PendingCollective {
 public:
  PendingCollective() = default;
  PendingCollective(c10::intrusive_ptr<c10d::Work> work, std::string what, std::chrono::seconds timeout,
                    const ProcessGroup* group = nullptr);
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;
  void wait();
  bool valid() const;

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::chrono::seconds timeout_{0};
  const ProcessGroup* group_ = nullptr;  // its group, asked which peer was lost when it fails
};

class ProcessGroup {
 public:
  ProcessGroup(const LaunchEnvironment& env, const GroupOptions& options);
  ~ProcessGroup();

  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  const LaunchEnvironment& environment() const { return env_; }
  std::chrono::seconds timeout() const { return options_.timeout; }
  const std::string& backend() const { return options_.backend; }
  // Where tensors for this group's collectives live: the CPU for Gloo, this rank's GPU (cuda:LOCAL_RANK) for NCCL.
  // Scalar collectives (sums of losses, agreements) use it.
  torch::Device device() const { return device_; }

  // In place, on every rank. The async form returns at once; the tensor must stay alive and untouched until wait().
  PendingCollective all_reduce_async(torch::Tensor& tensor, ReduceOp op, const std::string& what);
  void all_reduce(torch::Tensor& tensor, ReduceOp op, const std::string& what);
  double all_reduce(double value, ReduceOp op, const std::string& what);
  void broadcast(torch::Tensor& tensor, int root, const std::string& what);
  // `output` (size() x input's numel, contiguous) receives every rank's `input` in rank order (full_shard's gather).
  // The async form: both must stay alive, and `output` unread, until wait().
  PendingCollective all_gather_async(torch::Tensor& output, const torch::Tensor& input, const std::string& what);
  void all_gather(torch::Tensor& output, const torch::Tensor& input, const std::string& what);
  // `tensor` summed over ranks into `root`'s copy (the others' become scratch): shard_grad_op's gradient reduction.
  PendingCollective reduce_async(torch::Tensor& tensor, int root, const std::string& what);
  // `input` (size() x output's numel) summed over ranks; this rank's slice lands in `output` (full_shard's gradient
  // reduction). Both must stay alive and untouched until wait().
  PendingCollective reduce_scatter_async(torch::Tensor& output, torch::Tensor& input, const std::string& what);
  void barrier(const std::string& what);

  // After a failed collective: the peers found exited or stopped (distributed/peer_status.h), or "".
  std::string describe_lost_peers() const;

 private:
  LaunchEnvironment env_;
  GroupOptions options_;
  torch::Device device_{torch::kCPU};
  c10::intrusive_ptr<c10d::Backend> backend_;
  c10::intrusive_ptr<c10d::Store> store_;
};

// Whether this tune was built with c10d's NCCL backend (against a CUDA LibTorch whose NCCL headers were found).
bool nccl_built();

// The process group of this process, or nullptr in a single-process run.
ProcessGroup* world();
// Creates the process group (rendezvous with every other rank; blocks until all have joined or the timeout ends).
// Throws tune::Error when the rendezvous fails, naming the master address and port.
ProcessGroup& init_world(const LaunchEnvironment& env, const GroupOptions& options);

// Rank and size whether or not a group exists (0 and 1 without one).
int world_rank();
int world_size();
inline bool is_main_rank() { return world_rank() == 0; }

}  // namespace tune::distributed
