// Distributed training as the recipes see it (see data_parallel.h).
#include "tune/recipes/data_parallel.h"

#include <torch/cuda.h>

#include <map>
#include <stdexcept>
#include <thread>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/progress.h"
#include "tune/distributed/fully_sharded.h"
#include "tune/distributed/gradient_reducer.h"
#include "tune/distributed/launch_environment.h"
#include "tune/distributed/parameter_partition.h"
#include "tune/distributed/process_group.h"

namespace tune::recipes {

DistributedSettings read_distributed_settings(const config::Config& config) {
  DistributedSettings settings;
  const std::string backend = config.get_string("distributed.backend");
  const std::string device = config.get_string("device");
  const bool on_cuda = device == "cuda" || (device == "auto" && torch::cuda::is_available());
  if (backend == "nccl") {
    if (!distributed::nccl_built()) {
      config.fail("distributed.backend", "is 'nccl', which this tune is not built with (NCCL is compiled only against "
                                         "a CUDA LibTorch); use 'gloo' or 'auto' (Gloo also reduces CUDA tensors, "
                                         "through host memory)");
    }
    if (!on_cuda) config.fail("distributed.backend", "is 'nccl', which reduces CUDA tensors, but the device is cpu; "
                                                     "use 'gloo' or 'auto'");
  }
  // auto: NCCL for CUDA runs where built, else Gloo.
  settings.backend = backend == "nccl" || (backend == "auto" && on_cuda && distributed::nccl_built()) ? "nccl" : "gloo";
  settings.strategy = config.get_string("distributed.strategy");
  settings.shard_blocks = config.get_strings("distributed.shard_blocks");
  settings.prefetch = config.get_bool("distributed.prefetch");
  const double bucket_mb = config.get_real("distributed.bucket_mb");
  if (!(bucket_mb > 0) || bucket_mb > 4096) {
    config.fail("distributed.bucket_mb", fmt::format("must be in (0, 4096], got {}", bucket_mb));
  }
  settings.bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  settings.reduce_bf16 = config.get_string("distributed.reduce_dtype") == "bf16";
  const long long timeout = config.get_int("distributed.timeout_s");
  // At most a week: c10d counts the timeout in milliseconds, and a larger value overflows to a negative one.
  if (timeout < 1 || timeout > 7 * 24 * 3600) {
    config.fail("distributed.timeout_s", fmt::format("must be between 1 and 604800 (a week), got {}", timeout));
  }
  settings.timeout_s = timeout;
  return settings;
}

void join_distributed_run(const config::Config& config) {
  const auto environment = distributed::read_launch_environment();
  if (!environment || environment->world_size <= 1) {
    const std::string strategy = config.get_string("distributed.strategy");
    if (strategy != "ddp") {
      log::warn("distributed.strategy is {}, which divides state among processes, but this run has one process: "
                "nothing is sharded (start several with --nproc N, torchrun or srun)", strategy);
    }
    return;
  }
  const DistributedSettings settings = read_distributed_settings(config);
  log::set_rank(environment->rank);
  distributed::GroupOptions options;
  options.backend = settings.backend;
  options.timeout = std::chrono::seconds(settings.timeout_s);
  distributed::init_world(*environment, options);
  log::info("distributed: {} processes ({} launch, {} on this machine), c10d {} via {}:{}", environment->world_size,
            environment->source, environment->local_world_size, settings.backend, environment->master_addr,
            environment->master_port);
}

int threads_for_this_rank(int requested) {
  if (requested > 0) return requested;
  const auto* group = distributed::world();
  const int local = group ? group->environment().local_world_size : 1;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, cores / local);
}

void run_on_main_rank(const std::function<void()>& action, const std::string& what) {
  auto* group = distributed::world();
  if (group == nullptr) {
    action();
    return;
  }
  std::exception_ptr failure;
  int exit_code = 0;
  if (group->rank() == 0) {
    try {
      action();
    } catch (const Error& error) {
      failure = std::current_exception();
      exit_code = error.exit_code();
    } catch (...) {
      failure = std::current_exception();
      exit_code = 1;
    }
  }
  const int agreed = static_cast<int>(group->all_reduce(exit_code, distributed::ReduceOp::max, what));
  if (failure) std::rethrow_exception(failure);
  if (agreed != 0) throw Error(fmt::format("rank 0 failed to {} (its message says why)", what), agreed);
}

DataParallel::DataParallel(const config::Config& config, const std::vector<torch::Tensor>& everything,
                           const std::vector<torch::Tensor>& trainable, const ModelBlocks* blocks)
    : rank_(distributed::world_rank()), size_(distributed::world_size()), settings_(read_distributed_settings(config)) {
  // The block types are checked in every run, so a misspelt name fails on one process too.
  if (settings_.strategy == "full_shard" && blocks != nullptr) check_shard_blocks(config, *blocks);
  auto* group = distributed::world();
  if (group == nullptr) return;
  torch::NoGradGuard no_grad;
  for (const auto& tensor : everything) {
    auto data = tensor.detach();  // broadcast writes in place into the parameter's storage
    group->broadcast(data, 0, "initial parameters from rank 0");
  }
  if (settings_.strategy == "full_shard") {
    if (blocks == nullptr) throw std::logic_error("DataParallel: full_shard needs the model's blocks");
    shard_model(*blocks);
    return;
  }
  if (settings_.strategy == "shard_grad_op") {
    trainable_ = trainable;
    std::vector<int64_t> bytes;
    for (const auto& tensor : trainable) bytes.push_back(tensor.numel() * static_cast<int64_t>(tensor.element_size()));
    owner_ = distributed::partition_by_bytes(bytes, size_);
  }
  distributed::ReducerOptions options;
  options.bucket_bytes = settings_.bucket_bytes;
  options.reduce_dtype = settings_.reduce_bf16 ? torch::kBFloat16 : torch::kFloat32;
  options.owner = owner_;  // shard_grad_op: each gradient reduced to its owner, released elsewhere during backward
  reducer_ = std::make_unique<distributed::GradientReducer>(*group, trainable, options);
}

DataParallel::~DataParallel() = default;

RowRange DataParallel::share(int64_t rows) const {
  const int64_t base = rows / size_, extra = rows % size_;
  RowRange range;
  range.begin = rank_ * base + std::min<int64_t>(rank_, extra);
  range.end = range.begin + base + (rank_ < extra ? 1 : 0);
  return range;
}

std::optional<DataParallel::MicroBatchShare> DataParallel::micro_batch_share(int64_t rows) const {
  MicroBatchShare share{this->share(rows), false};
  if (share.rows.size() > 0) return share;
  if (!every_rank_computes()) return std::nullopt;
  return MicroBatchShare{{0, 1}, true};
}

void DataParallel::before_backward(bool last_of_step) {
  if (reducer_) reducer_->set_sync(last_of_step);
}

void DataParallel::finish_gradients() {
  if (sharded_) {
    finish_sharded_gradients();
    return;
  }
  if (!reducer_) return;
  reducer_->finish();
}

std::vector<train::NamedParameter> DataParallel::optimizer_share(const std::vector<train::NamedParameter>& params) const {
  if (!shards_optimizer_state()) return params;
  std::vector<train::NamedParameter> share;
  for (const auto& param : params) {
    bool found = false;
    for (size_t i = 0; i < trainable_.size() && !found; ++i) {
      if (!trainable_[i].is_same(param.tensor)) continue;
      found = true;
      if (owner_[i] == rank_) share.push_back(param);
    }
    if (!found) throw std::logic_error("optimizer_share: " + param.name + " is not among the reduced parameters");
  }
  return share;
}

std::function<double(double)> DataParallel::gradient_norm_sum() const {
  if (!active() || !shards_optimizer_state()) return {};
  return [this](double squared) { return sum(squared); };
}

void DataParallel::after_update(bool applied) {
  // Every rank agrees on `applied` (the loss and the global gradient norm are sums over ranks), so all of them
  // take part in the same broadcasts or none does.
  if (!shards_optimizer_state() || !applied) return;
  auto* group = distributed::world();
  torch::NoGradGuard no_grad;
  // One broadcast per owner and dtype: the owner's parameters flattened into one buffer, written back on the others.
  for (int root = 0; root < size_; ++root) {
    std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
    for (size_t i = 0; i < owner_.size(); ++i) {
      if (owner_[i] == root) by_dtype[trainable_[i].scalar_type()].push_back(trainable_[i]);
    }
    for (auto& [dtype, tensors] : by_dtype) {
      std::vector<torch::Tensor> flat_views;
      for (const auto& tensor : tensors) flat_views.push_back(tensor.detach().reshape({-1}));
      torch::Tensor buffer = torch::cat(flat_views);
      group->broadcast(buffer, root, "updated parameters from their owner");
      if (root == rank_) continue;
      int64_t offset = 0;
      for (auto& tensor : tensors) {
        tensor.detach().copy_(buffer.slice(0, offset, offset + tensor.numel()).view_as(tensor));
        offset += tensor.numel();
      }
    }
  }
}

double DataParallel::sum(double value) const {
  auto* group = distributed::world();
  return group ? group->all_reduce(value, distributed::ReduceOp::sum, "sum of a training scalar") : value;
}

torch::Tensor DataParallel::sum(torch::Tensor values) const {
  auto* group = distributed::world();
  if (group == nullptr) return values;
  values = values.contiguous().clone();
  group->all_reduce(values, distributed::ReduceOp::sum, "sum of per-row figures");
  return values;
}

std::string DataParallel::describe() const {
  if (sharded_) return describe_sharded();
  if (!reducer_) return "single process";
  std::string sharding;
  if (shards_optimizer_state()) {
    int64_t owned = 0, total = 0;
    for (size_t i = 0; i < owner_.size(); ++i) {
      const int64_t bytes = trainable_[i].numel() * static_cast<int64_t>(trainable_[i].element_size());
      total += bytes;
      if (owner_[i] == rank_) owned += bytes;
    }
    sharding = fmt::format("; this process keeps gradients and optimizer state for {} of the {} trainable "
                           "parameter bytes and sends its updated share after each step",
                           format_bytes(static_cast<double>(owned)), format_bytes(static_cast<double>(total)));
  }
  return fmt::format("{} processes, strategy {}: {} gradient bucket(s), {} {} per step in {} (overlapped "
                     "with backward){}", size_, settings_.strategy, reducer_->bucket_count(),
                     format_bytes(static_cast<double>(reducer_->bytes_per_step())),
                     shards_optimizer_state() ? "reduced to their owners" : "all-reduced",
                     settings_.reduce_bf16 ? "bf16" : "fp32", sharding);
}

}  // namespace tune::recipes
