// Distributed training as the recipes see it (see data_parallel.h).
#include "tune/recipes/data_parallel.h"

#include <thread>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/progress.h"
#include "tune/distributed/gradient_reducer.h"
#include "tune/distributed/launch_environment.h"
#include "tune/distributed/process_group.h"

namespace tune::recipes {

DistributedSettings read_distributed_settings(const config::Config& config) {
  DistributedSettings settings;
  const std::string backend = config.get_string("distributed.backend");
  if (backend == "nccl") {
    config.fail("distributed.backend", "is 'nccl', which this tune is not built with (no NCCL build exists yet); "
                                       "use 'gloo' or 'auto' (Gloo also reduces CUDA tensors, through host memory)");
  }
  settings.backend = "gloo";
  settings.strategy = config.get_string("distributed.strategy");
  if (settings.strategy != "ddp") {
    config.fail("distributed.strategy", fmt::format("is '{}', which is not implemented yet (sharded parameters, "
                                                    "gradients and optimizer state are planned); use 'ddp'",
                                                    settings.strategy));
  }
  const double bucket_mb = config.get_real("distributed.bucket_mb");
  if (!(bucket_mb > 0) || bucket_mb > 4096) {
    config.fail("distributed.bucket_mb", fmt::format("must be in (0, 4096], got {}", bucket_mb));
  }
  settings.bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  settings.reduce_bf16 = config.get_string("distributed.reduce_dtype") == "bf16";
  const long long timeout = config.get_int("distributed.timeout_s");
  if (timeout < 1) config.fail("distributed.timeout_s", fmt::format("must be >= 1, got {}", timeout));
  settings.timeout_s = timeout;
  return settings;
}

void join_distributed_run(const config::Config& config) {
  const auto environment = distributed::read_launch_environment();
  if (!environment || environment->world_size <= 1) return;
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
                           const std::vector<torch::Tensor>& trainable)
    : rank_(distributed::world_rank()), size_(distributed::world_size()), settings_(read_distributed_settings(config)) {
  auto* group = distributed::world();
  if (group == nullptr) return;
  torch::NoGradGuard no_grad;
  for (const auto& tensor : everything) {
    auto data = tensor.detach();  // broadcast writes in place into the parameter's storage
    group->broadcast(data, 0, "initial parameters from rank 0");
  }
  distributed::ReducerOptions options;
  options.bucket_bytes = settings_.bucket_bytes;
  options.reduce_dtype = settings_.reduce_bf16 ? torch::kBFloat16 : torch::kFloat32;
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

void DataParallel::before_backward(bool last_of_step) {
  if (reducer_) reducer_->set_sync(last_of_step);
}

void DataParallel::finish_gradients() {
  if (reducer_) reducer_->finish();
}

double DataParallel::sum(double value) const {
  auto* group = distributed::world();
  return group ? group->all_reduce(value, distributed::ReduceOp::sum, "sum of a training scalar") : value;
}

std::string DataParallel::describe() const {
  if (!reducer_) return "single process";
  return fmt::format("{} processes, strategy ddp: {} gradient bucket(s), {} all-reduced per step in {} (overlapped "
                     "with backward)", size_, reducer_->bucket_count(),
                     format_bytes(static_cast<double>(reducer_->bytes_per_step())),
                     settings_.reduce_bf16 ? "bf16" : "fp32");
}

}  // namespace tune::recipes
