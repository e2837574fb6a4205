// The ddp gradient reducer (see gradient_reducer.h).
#include "tune/distributed/gradient_reducer.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <fmt/format.h>

#include <mutex>

#include "tune/core/error.h"

namespace tune::distributed {

struct GradientReducer::State {
  struct Bucket {
    std::vector<int64_t> params;  // indices into State::params
    int64_t pending = 0;          // gradients not yet ready this step
    torch::Tensor flat;           // the reduction buffer while in flight
    std::vector<PendingCollective> works;
    bool launched = false;
    bool settled = false;         // waited for, sums written back
  };

  ProcessGroup* group = nullptr;
  ReducerOptions options;
  std::vector<torch::Tensor> params;
  std::vector<int64_t> bucket_of;   // parameter -> bucket
  std::vector<char> ready;          // parameter -> its gradient arrived this step
  std::vector<Bucket> buckets;
  int64_t next_to_launch = 0;
  bool sync = true;
  std::mutex mutex;

  void reset_step() {
    std::fill(ready.begin(), ready.end(), 0);
    for (auto& bucket : buckets) {
      bucket.pending = static_cast<int64_t>(bucket.params.size());
      bucket.flat = torch::Tensor();
      bucket.works.clear();
      bucket.launched = false;
      bucket.settled = false;
    }
    next_to_launch = 0;
  }

  // Flattens the bucket's gradients (zeros for those that never arrived) and starts its all-reduce.
  void launch(Bucket& bucket, int64_t index) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> pieces;
    for (const int64_t i : bucket.params) {
      const auto& grad = params[i].grad();
      pieces.push_back(grad.defined() ? grad.reshape(-1) : torch::zeros({params[i].numel()}, params[i].options()));
    }
    bucket.flat = torch::cat(pieces).to(options.reduce_dtype);
    pieces.clear();
    bucket.launched = true;
    if (options.owner.empty()) {
      bucket.works.push_back(group->all_reduce_async(bucket.flat, ReduceOp::sum, fmt::format("gradient bucket {}", index)));
      return;
    }
    // shard_grad_op: each run of parameters with one owner is a contiguous slice of the bucket, reduced to it.
    int64_t offset = 0;
    for (size_t j = 0; j < bucket.params.size();) {
      const int root = options.owner[static_cast<size_t>(bucket.params[j])];
      const int64_t begin = offset;
      for (; j < bucket.params.size() && options.owner[static_cast<size_t>(bucket.params[j])] == root; ++j) {
        offset += params[static_cast<size_t>(bucket.params[j])].numel();
      }
      auto slice = bucket.flat.narrow(0, begin, offset - begin);
      bucket.works.push_back(group->reduce_async(slice, root, fmt::format("gradient bucket {} to rank {}", index, root)));
    }
    // The values are in the bucket now: the gradients this rank does not own are let go at once.
    for (const int64_t i : bucket.params) {
      if (options.owner[static_cast<size_t>(i)] != group->rank()) params[static_cast<size_t>(i)].mutable_grad().reset();
    }
  }

  // Waits for a launched bucket and writes the sums into the gradients this rank keeps.
  void settle(Bucket& bucket) {
    if (!bucket.launched || bucket.settled) return;
    for (auto& work : bucket.works) work.wait();
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (const int64_t i : bucket.params) {
      auto& param = params[static_cast<size_t>(i)];
      const int64_t numel = param.numel();
      const bool kept = options.owner.empty() || options.owner[static_cast<size_t>(i)] == group->rank();
      if (kept) {
        auto sum = bucket.flat.narrow(0, offset, numel).view(param.sizes()).to(param.scalar_type());
        if (param.grad().defined()) {
          param.mutable_grad().copy_(sum);
        } else {
          param.mutable_grad() = sum.clone();
        }
      }
      offset += numel;
    }
    bucket.flat = torch::Tensor();
    bucket.works.clear();
    bucket.settled = true;
  }

  // Launches every bucket from next_to_launch on that is complete, in index order (the same order on all ranks).
  void launch_ready_buckets() {
    while (next_to_launch < static_cast<int64_t>(buckets.size()) && buckets[next_to_launch].pending == 0) {
      if (next_to_launch >= 2) settle(buckets[next_to_launch - 2]);
      launch(buckets[next_to_launch], next_to_launch);
      ++next_to_launch;
    }
  }

  void mark_ready(int64_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!sync) return;
    if (ready[index]) {
      throw Error(fmt::format("internal: the gradient of trainable parameter {} arrived twice in one backward pass "
                              "(it would be all-reduced twice)", index));
    }
    ready[index] = 1;
    --buckets[bucket_of[index]].pending;
    launch_ready_buckets();
  }
};

namespace {

// Runs after AccumulateGrad has added this backward's gradient into param.grad.
class ReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(std::weak_ptr<GradientReducer::State> state, int64_t index) : state_(std::move(state)), index_(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override {
    if (auto state = state_.lock()) state->mark_ready(index_);
  }

 private:
  std::weak_ptr<GradientReducer::State> state_;
  int64_t index_;
};

}  // namespace

GradientReducer::GradientReducer(ProcessGroup& group, const std::vector<torch::Tensor>& params,
                                 const ReducerOptions& options)
    : state_(std::make_shared<State>()) {
  if (options.reduce_dtype != torch::kFloat32 && options.reduce_dtype != torch::kBFloat16) {
    throw Error("internal: the gradient reduce dtype must be fp32 or bf16");
  }
  auto& state = *state_;
  state.group = &group;
  state.options = options;
  if (!options.owner.empty() && options.owner.size() != params.size()) {
    throw Error("internal: the gradient reducer's owners do not match its parameters");
  }
  state.params = params;
  state.bucket_of.assign(params.size(), -1);
  state.ready.assign(params.size(), 0);
  // Reverse order: the last layers' gradients come first in backward, so their bucket can leave first.
  int64_t bucket_bytes = 0;
  for (int64_t i = static_cast<int64_t>(params.size()) - 1; i >= 0; --i) {
    const auto& param = params[i];
    if (!param.requires_grad()) throw Error("internal: the gradient reducer was given a frozen parameter");
    const int64_t bytes = param.numel() * static_cast<int64_t>(c10::elementSize(options.reduce_dtype));
    const bool new_bucket = state.buckets.empty() || bucket_bytes + bytes > options.bucket_bytes ||
                            params[state.buckets.back().params.front()].scalar_type() != param.scalar_type();
    if (new_bucket) {
      state.buckets.emplace_back();
      bucket_bytes = 0;
    }
    state.buckets.back().params.push_back(i);
    state.bucket_of[i] = static_cast<int64_t>(state.buckets.size()) - 1;
    bucket_bytes += bytes;
    torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<ReadyHook>(state_, i));
  }
  state.reset_step();
}

GradientReducer::~GradientReducer() {
  for (const auto& param : state_->params) torch::autograd::impl::set_post_acc_grad_hooks(param, nullptr);
}

void GradientReducer::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->sync = sync;
}

void GradientReducer::finish() {
  auto& state = *state_;
  std::lock_guard<std::mutex> lock(state.mutex);
  // Parameters that got no gradient (unused this step) count as complete with zeros, on every rank alike.
  for (auto& bucket : state.buckets) bucket.pending = 0;
  state.launch_ready_buckets();
  for (auto& bucket : state.buckets) state.settle(bucket);
  state.reset_step();
}

int64_t GradientReducer::bucket_count() const { return static_cast<int64_t>(state_->buckets.size()); }

int64_t GradientReducer::bytes_per_step() const {
  int64_t bytes = 0;
  for (const auto& param : state_->params) {
    bytes += param.numel() * static_cast<int64_t>(c10::elementSize(state_->options.reduce_dtype));
  }
  return bytes;
}

}  // namespace tune::distributed
