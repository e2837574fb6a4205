// c10d process group: TCPStore rendezvous on MASTER_ADDR:MASTER_PORT (rank 0 serves it) and ProcessGroupGloo.
//
// NCCL (ProcessGroupNCCL) is compiled only against a CUDA LibTorch whose NCCL headers and library CMake found
// (TUNE_WITH_NCCL, src/tune/distributed/CMakeLists.txt); each rank then binds to cuda:LOCAL_RANK. The CPU build has
// Gloo only (Gloo also reduces CUDA tensors, through host memory). NCCL has been compiled and linked here (the CUDA
// compile check) but never run: no GPU machine with several GPUs has been available yet.
#include "tune/distributed/process_group.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(TUNE_WITH_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <fmt/format.h>

#include <cstdlib>

#include "tune/core/error.h"
#include "tune/distributed/peer_status.h"
#include "tune/distributed/quiet_c10_logs.h"

namespace tune::distributed {
namespace {

std::unique_ptr<ProcessGroup> current_world;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return c10d::ReduceOp::SUM;
    case ReduceOp::max: return c10d::ReduceOp::MAX;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

// Strips LibTorch's C++ stack trace from c10::Error (the first line says what happened) and Gloo's source location
// ("[/__w/pytorch/.../gloo/transport/tcp/pair.cc:553] Connection closed by peer ..."), which means nothing to a user.
std::string first_line(const std::string& message) {
  std::string line = message.substr(0, message.find('\n'));
  // "[<path>.cc:<line>] " anywhere in the line ("Gloo connectFullMesh failed with [/__w/.../pair.cc:553] ...").
  size_t open = line.find('[');
  while (open != std::string::npos) {
    const size_t close = line.find("] ", open);
    if (close == std::string::npos) break;
    const std::string inside = line.substr(open, close - open);
    if (inside.find(".cc:") != std::string::npos && inside.find(' ') == std::string::npos) {
      line.erase(open, close + 2 - open);
      open = line.find('[', open);
    } else {
      open = line.find('[', open + 1);
    }
  }
  // Gloo's advice to PyTorch developers ("This is typically caused by a remote worker hanging ... GLHF!").
  const size_t advice = line.find(" This is typically caused by");
  if (advice != std::string::npos) line.erase(advice);
  return line;
}

// Starts a c10d collective (`launch` returns its Work); a failure to start becomes tune::Error naming it.
template <typename Launch>
PendingCollective start(const ProcessGroup* group, const std::string& what, std::chrono::seconds timeout,
                        Launch&& launch) {
  try {
    return PendingCollective(launch(), what, timeout, group);
  } catch (const std::exception& error) {
    throw Error(fmt::format("rank {}: the collective '{}' could not start: {}", group->rank(), what,
                            first_line(error.what())));
  }
}

std::chrono::milliseconds in_ms(std::chrono::seconds timeout) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
}

// The network interfaces Gloo's peers connect on, chosen as PyTorch does: GLOO_SOCKET_IFNAME (comma-separated) when
// set; loopback when the master is on this machine's loopback (--nproc); else the address this host's name
// resolves to (multi-node).
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices(const LaunchEnvironment& env) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names != nullptr && *names != '\0') {
    std::string list = names;
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(',', start), list.size());
      if (end > start) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(list.substr(start, end - start)));
      start = end + 1;
    }
    return devices;
  }
  const bool loopback = env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0;
  devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                             : c10d::ProcessGroupGloo::createDefaultDevice());
  return devices;
}

}  // namespace

PendingCollective::PendingCollective(c10::intrusive_ptr<c10d::Work> work, std::string what,
                                     std::chrono::seconds timeout, const ProcessGroup* group)
    : work_(std::move(work)), what_(std::move(what)), timeout_(timeout), group_(group) {}
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;

bool PendingCollective::valid() const { return static_cast<bool>(work_); }

void PendingCollective::wait() {
  if (!work_) return;
  auto work = std::move(work_);
  const auto started = std::chrono::steady_clock::now();
  try {
    work->wait(std::chrono::duration_cast<std::chrono::milliseconds>(timeout_));
  } catch (const std::exception& error) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // Which peer: found from here where it ran on this host (peer_status.h); else its own message or the launcher's.
    const std::string lost = group_ != nullptr ? group_->describe_lost_peers() : std::string();
    // Well before the timeout, the collective did not time out: a peer's connection closed (it exited or was killed).
    if (waited < 0.9 * static_cast<double>(timeout_.count())) {
      throw Error(fmt::format("rank {}: the collective '{}' failed after {:.1f} s, before distributed.timeout_s={}: {}: "
                              "{}",
                              world_rank(), what_, waited, timeout_.count(),
                              lost.empty() ? "another rank exited or was killed (its own message, or the launcher's, "
                                             "names it)"
                                           : lost,
                              first_line(error.what())));
    }
    throw Error(fmt::format("rank {}: the collective '{}' did not complete within distributed.timeout_s={}: {}: {}",
                            world_rank(), what_, timeout_.count(),
                            lost.empty() ? "another rank stopped responding, or failed (see its message above)" : lost,
                            first_line(error.what())));
  }
}

bool nccl_built() {
#if defined(TUNE_WITH_NCCL)
  return true;
#else
  return false;
#endif
}


ProcessGroup::ProcessGroup(const LaunchEnvironment& env, const GroupOptions& options) : env_(env), options_(options) {
  if (options.backend != "gloo" && !(options.backend == "nccl" && nccl_built())) {
    throw UsageError(fmt::format("distributed backend '{}' is not built into this tune; use gloo", options.backend));
  }
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  const QuietC10Logs quiet;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0 && !env.agent_store;
    store_options.numWorkers = env.world_size;
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    record_process(*store, env.rank);
    store_ = store;
#if defined(TUNE_WITH_NCCL)
    if (options.backend == "nccl") {
      // One GPU per local rank (torchrun's convention); NCCL's communicators are created on the current device.
      device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
      c10::cuda::set_device(device_.index());
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = timeout;
      backend_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, nccl_options);
      return;
    }
#endif
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo_options->devices = gloo_devices(env);
    gloo_options->threads = 2;
    backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, gloo_options);
  } catch (const std::exception& error) {  // c10::Error from c10d, gloo::EnforceNotMet from a bad interface
    throw Error(fmt::format("rank {} of {}: rendezvous at {}:{} ({}) failed within {} s: {}", env.rank, env.world_size,
                            env.master_addr, env.master_port, env.source, options.timeout.count(),
                            first_line(error.what())));
  }
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::describe_lost_peers() const {
  return store_ ? distributed::describe_lost_peers(*store_, env_.rank, env_.world_size) : std::string();
}

PendingCollective ProcessGroup::all_reduce_async(torch::Tensor& tensor, ReduceOp op, const std::string& what) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions reduce_options;
  reduce_options.reduceOp = to_c10d(op);
  reduce_options.timeout = in_ms(options_.timeout);
  return start(this, what, options_.timeout, [&] { return backend_->allreduce(tensors, reduce_options); });
}

void ProcessGroup::all_reduce(torch::Tensor& tensor, ReduceOp op, const std::string& what) {
  all_reduce_async(tensor, op, what).wait();
}

double ProcessGroup::all_reduce(double value, ReduceOp op, const std::string& what) {
  auto tensor = torch::tensor({value}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  all_reduce(tensor, op, what);
  return tensor.item<double>();
}

void ProcessGroup::broadcast(torch::Tensor& tensor, int root, const std::string& what) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions broadcast_options;
  broadcast_options.rootRank = root;
  broadcast_options.timeout = in_ms(options_.timeout);
  start(this, what, options_.timeout, [&] { return backend_->broadcast(tensors, broadcast_options); }).wait();
}

PendingCollective ProcessGroup::all_gather_async(torch::Tensor& output, const torch::Tensor& input,
                                                 const std::string& what) {
  c10d::AllgatherOptions gather_options;
  gather_options.timeout = in_ms(options_.timeout);
  at::Tensor source = input;
  return start(this, what, options_.timeout,
               [&] { return backend_->_allgather_base(output, source, gather_options); });
}

void ProcessGroup::all_gather(torch::Tensor& output, const torch::Tensor& input, const std::string& what) {
  all_gather_async(output, input, what).wait();
}

PendingCollective ProcessGroup::reduce_async(torch::Tensor& tensor, int root, const std::string& what) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::ReduceOptions reduce_options;
  reduce_options.reduceOp = c10d::ReduceOp::SUM;
  reduce_options.rootRank = root;
  reduce_options.timeout = in_ms(options_.timeout);
  return start(this, what, options_.timeout, [&] { return backend_->reduce(tensors, reduce_options); });
}

PendingCollective ProcessGroup::reduce_scatter_async(torch::Tensor& output, torch::Tensor& input,
                                                     const std::string& what) {
  c10d::ReduceScatterOptions scatter_options;
  scatter_options.reduceOp = c10d::ReduceOp::SUM;
  scatter_options.timeout = in_ms(options_.timeout);
  return start(this, what, options_.timeout,
               [&] { return backend_->_reduce_scatter_base(output, input, scatter_options); });
}

void ProcessGroup::barrier(const std::string& what) {
  // A one-element all-reduce: Gloo's barrier has no per-call timeout in every LibTorch version.
  (void)all_reduce(0.0, ReduceOp::sum, what);
}

ProcessGroup* world() { return current_world.get(); }

ProcessGroup& init_world(const LaunchEnvironment& env, const GroupOptions& options) {
  if (current_world) throw Error("internal: the process group was initialised twice");
  current_world = std::make_unique<ProcessGroup>(env, options);
  return *current_world;
}

int world_rank() { return current_world ? current_world->rank() : 0; }
int world_size() { return current_world ? current_world->size() : 1; }

}  // namespace tune::distributed
