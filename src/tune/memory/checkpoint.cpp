// Activation checkpointing: the autograd Function that recomputes a block in backward, and the runner that
// decides from the policy which blocks go through it.
#include "tune/memory/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "tune/core/error.h"
#include "tune/precision/mixed_precision.h"

namespace tune::memory {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// saved_data holds IValues only; a capsule ties the block's lifetime to the autograd node, so a graph that is
// dropped without backward frees it too. (Capsules are an internal IValue kind, but stable from 1.13 to 2.x.)
struct BlockHolder : torch::CustomClassHolder {
  explicit BlockHolder(nn::BlockFunction function) : block(std::move(function)) {}
  nn::BlockFunction block;
};

torch::Tensor get_rng_state(const at::Generator& generator) {
  // The default generators are shared by all threads: state reads and writes go under its mutex.
  at::Generator gen = generator;
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const at::Generator& generator, const torch::Tensor& state) {
  at::Generator gen = generator;
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Sets the RNG states forward saw and puts the current ones back on scope exit (torch.utils.checkpoint's
// fork_rng): the recompute must draw the same dropout masks, and the training loop must not see its RNG rewound.
class RngFork {
 public:
  RngFork(const torch::Tensor& cpu_state, const c10::optional<torch::Device>& cuda_device,
          const torch::Tensor& cuda_state) {
    cpu_generator_ = at::detail::getDefaultCPUGenerator();
    cpu_current_ = get_rng_state(cpu_generator_);
    if (cuda_device) {
      cuda_generator_ = at::globalContext().defaultGenerator(*cuda_device);
      cuda_current_ = get_rng_state(*cuda_generator_);
      set_rng_state(*cuda_generator_, cuda_state);
    }
    set_rng_state(cpu_generator_, cpu_state);
  }
  ~RngFork() {
    set_rng_state(cpu_generator_, cpu_current_);
    if (cuda_generator_) set_rng_state(*cuda_generator_, cuda_current_);
  }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  at::Generator cpu_generator_;
  torch::Tensor cpu_current_;
  c10::optional<at::Generator> cuda_generator_;
  torch::Tensor cuda_current_;
};

// Autocast caches the low-precision cast of each fp32 leaf weight for the rest of the enclosing scope. A cast
// made under no-grad (checkpointed forward) has no grad_fn, so a later use of the same weight in that scope (a
// recompute when backward runs inside the scope, or a tied weight) would silently get no gradient. Blocks run
// by checkpoint therefore bypass the cache; the cost is one extra cast per weight.
class AutocastCacheDisabled {
 public:
  AutocastCacheDisabled() : previous_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheDisabled() { at::autocast::set_autocast_cache_enabled(previous_); }
  AutocastCacheDisabled(const AutocastCacheDisabled&) = delete;
  AutocastCacheDisabled& operator=(const AutocastCacheDisabled&) = delete;

 private:
  bool previous_;
};

std::string describe_tensor(at::IntArrayRef sizes, at::ScalarType dtype) {
  return fmt::format("shape [{}] dtype {}", fmt::join(sizes, ", "), c10::toString(dtype));
}

// Autograd sees the block as one node whose inputs are (block, input, params...): `params` travels as a
// TensorList because Function::apply unpacks a TensorList into one input edge per tensor (a std::vector<Tensor>
// would be taken as an opaque non-tensor argument), and that is what makes parameter gradients flow back.
class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const nn::BlockFunction& block, const torch::Tensor& input,
                               at::TensorList params) {
    ctx->saved_data["block"] = c10::IValue::make_capsule(c10::make_intrusive<BlockHolder>(block));
    ctx->saved_data["cpu_rng"] = get_rng_state(at::detail::getDefaultCPUGenerator());
    if (input.is_cuda()) {
      ctx->saved_data["cuda_rng"] = get_rng_state(at::globalContext().defaultGenerator(input.device()));
      ctx->saved_data["cuda_device"] = static_cast<int64_t>(input.device().index());
    }
    const auto autocast = precision::AutocastState::current();
    ctx->saved_data["autocast_cpu"] = autocast.cpu_enabled;
    ctx->saved_data["autocast_cpu_dtype"] = static_cast<int64_t>(autocast.cpu_dtype);
    ctx->saved_data["autocast_cuda"] = autocast.cuda_enabled;
    ctx->saved_data["autocast_cuda_dtype"] = static_cast<int64_t>(autocast.cuda_dtype);

    // Params are saved too, not only the input: their version counters then catch an optimizer step taken
    // between forward and backward, which would make the recompute silently use different weights.
    variable_list to_save{input};
    to_save.insert(to_save.end(), params.begin(), params.end());
    ctx->save_for_backward(to_save);

    torch::Tensor output;
    {
      torch::NoGradGuard no_grad;
      AutocastCacheDisabled no_cache;
      output = block(input);
    }
    // A block that returns its input or a view of it would make the output alias a saved tensor: an in-place
    // op downstream would then bump the saved input's version and break backward. A copy keeps them apart.
    bool aliases = output.is_alias_of(input);
    for (const auto& param : params) aliases = aliases || output.is_alias_of(param);
    if (aliases) output = output.clone();

    ctx->saved_data["output_sizes"] = output.sizes().vec();
    ctx->saved_data["output_dtype"] = static_cast<int64_t>(output.scalar_type());
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const size_t num_params = saved.size() - 1;
    auto holder = ctx->saved_data["block"].toCapsule();
    const auto& block = static_cast<BlockHolder*>(holder.get())->block;

    // Edge 0 is the input, edges 1.. the params; only what this backward pass asks for is computed, so an
    // outer autograd::grad w.r.t. the input alone does no parameter work.
    std::vector<torch::Tensor> wrt;
    std::vector<size_t> wrt_edge;

    torch::Tensor detached = input.detach();
    // requires_grad on the copy regardless of the original: the recompute must build a graph back to it
    // whenever the input gradient is requested.
    if (detached.is_floating_point() || detached.is_complex()) detached.requires_grad_(true);
    if (ctx->needs_input_grad(0) && detached.requires_grad()) {
      wrt.push_back(detached);
      wrt_edge.push_back(0);
    }
    for (size_t i = 0; i < num_params; ++i) {
      if (ctx->needs_input_grad(i + 1) && saved[i + 1].requires_grad()) {
        wrt.push_back(saved[i + 1]);
        wrt_edge.push_back(i + 1);
      }
    }

    c10::optional<torch::Device> cuda_device;
    torch::Tensor cuda_rng;
    if (ctx->saved_data.count("cuda_rng") != 0) {
      cuda_device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ctx->saved_data["cuda_device"].toInt()));
      cuda_rng = ctx->saved_data["cuda_rng"].toTensor();
    }
    precision::AutocastState autocast;
    autocast.cpu_enabled = ctx->saved_data["autocast_cpu"].toBool();
    autocast.cpu_dtype = static_cast<torch::ScalarType>(ctx->saved_data["autocast_cpu_dtype"].toInt());
    autocast.cuda_enabled = ctx->saved_data["autocast_cuda"].toBool();
    autocast.cuda_dtype = static_cast<torch::ScalarType>(ctx->saved_data["autocast_cuda_dtype"].toInt());

    torch::Tensor output;
    {
      RngFork rng(ctx->saved_data["cpu_rng"].toTensor(), cuda_device, cuda_rng);
      precision::AutocastScope autocast_scope(autocast);
      AutocastCacheDisabled no_cache;
      torch::AutoGradMode grad_mode(true);
      output = block(detached);
    }

    const auto forward_sizes = ctx->saved_data["output_sizes"].toIntVector();
    const auto forward_dtype = static_cast<torch::ScalarType>(ctx->saved_data["output_dtype"].toInt());
    if (output.sizes() != at::IntArrayRef(forward_sizes) || output.scalar_type() != forward_dtype) {
      throw Error(fmt::format(
          "checkpoint: recompute of block produced {}, forward produced {}. The block must be deterministic in "
          "shape and dtype given its input (no dependence on global state that changes between forward and "
          "backward).",
          describe_tensor(output.sizes(), output.scalar_type()), describe_tensor(forward_sizes, forward_dtype)));
    }

    // Slot 0 answers the (non-tensor) block argument, then input, then params, as apply() laid them out.
    variable_list grads(num_params + 2);
    if (!wrt.empty() && output.requires_grad()) {
      const variable_list computed = torch::autograd::grad({output}, wrt, {grad_outputs[0]},
                                                           /*retain_graph=*/false, /*create_graph=*/false,
                                                           /*allow_unused=*/true);
      for (size_t i = 0; i < wrt.size(); ++i) grads[wrt_edge[i] + 1] = computed[i];
    }
    return grads;
  }
};

}  // namespace

torch::Tensor checkpoint(const nn::BlockFunction& block, const torch::Tensor& input,
                         const std::vector<torch::Tensor>& params) {
  if (!torch::GradMode::is_enabled()) return block(input);
  bool any_requires_grad = input.requires_grad();
  for (const auto& param : params) any_requires_grad = any_requires_grad || param.requires_grad();
  // Nothing to differentiate: checkpointing would only add the recompute bookkeeping.
  if (!any_requires_grad) return block(input);
  return CheckpointFunction::apply(block, input, at::TensorList(params));
}

namespace {

const char* policy_name(Policy policy) {
  switch (policy) {
    case Policy::off:
      return "off";
    case Policy::full:
      return "full";
    case Policy::every_k:
      return "every_k";
    case Policy::sqrt:
      return "sqrt";
  }
  return "off";
}

}  // namespace

Policy parse_policy(const std::string& name) {
  for (Policy policy : {Policy::off, Policy::full, Policy::every_k, Policy::sqrt}) {
    if (name == policy_name(policy)) return policy;
  }
  throw UsageError(fmt::format(
      "checkpointing.policy: unknown policy '{}'; valid policies: off, full, every_k, sqrt "
      "(selective and offload are not implemented yet)",
      name));
}

CheckpointRunner::CheckpointRunner(CheckpointOptions options, int64_t num_blocks)
    : options_(options), num_blocks_(num_blocks), checkpointed_(static_cast<size_t>(std::max<int64_t>(num_blocks, 0))) {
  if (num_blocks < 0) throw Error(fmt::format("checkpoint: num_blocks must be >= 0, got {}", num_blocks));
  if (options_.policy == Policy::every_k && options_.k < 1) {
    throw UsageError(fmt::format("checkpointing.k: must be >= 1 for policy every_k, got {}", options_.k));
  }
  switch (options_.policy) {
    case Policy::off:
      break;
    case Policy::full:
      checkpointed_.assign(checkpointed_.size(), true);
      break;
    case Policy::every_k:
      for (int64_t i = 0; i < num_blocks_; i += options_.k) checkpointed_[i] = true;
      break;
    case Policy::sqrt: {
      // ceil(sqrt(L)) blocks spaced L/n apart. Each checkpointed block is its own segment for now; true
      // segments (one checkpoint spanning L/n consecutive blocks, saving only each segment's input) are future
      // work, and would cut memory further.
      if (num_blocks_ == 0) break;
      const auto count = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(num_blocks_))));
      for (int64_t j = 0; j < count; ++j) checkpointed_[j * num_blocks_ / count] = true;
      break;
    }
  }
}

torch::Tensor CheckpointRunner::run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                                    const std::vector<torch::Tensor>& params) {
  return is_checkpointed(block_index) ? checkpoint(block, input, params) : block(input);
}

bool CheckpointRunner::is_checkpointed(int64_t block_index) const {
  if (block_index < 0 || block_index >= num_blocks_) {
    throw Error(fmt::format("checkpoint: block index {} out of range; the runner was built for {} blocks",
                            block_index, num_blocks_));
  }
  return checkpointed_[static_cast<size_t>(block_index)];
}

int64_t CheckpointRunner::checkpointed_blocks() const {
  return static_cast<int64_t>(std::count(checkpointed_.begin(), checkpointed_.end(), true));
}

std::string CheckpointRunner::describe() const {
  if (options_.policy == Policy::off) return "off";
  const std::string policy = options_.policy == Policy::every_k ? fmt::format("every_k (k={})", options_.k)
                                                                : std::string(policy_name(options_.policy));
  return fmt::format("on, policy {}, {}/{} blocks", policy, checkpointed_blocks(), num_blocks_);
}

}  // namespace tune::memory
