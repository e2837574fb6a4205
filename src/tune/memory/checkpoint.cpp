// Activation checkpointing: the autograd Function that recomputes a block in backward, and the runner that
// decides from the policy which blocks go through it.
#include "tune/memory/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>

#include "tune/core/cuda_capture.h"
#include "tune/core/error.h"
#include "tune/precision/mixed_precision.h"

namespace tune::memory {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A parameter's post-accumulate-grad hook (what tune's gradient reducers and compact gradients hook) must run once
// per backward. With the gradients accumulated inside the recompute's backward, the outer pass still calls each
// parameter's AccumulateGrad node, with no gradient (the checkpoint returns none for it); LibTorch 2.x calls the
// hook then too, after accumulating nothing. Whether it does is probed once, through the engine, on a one-element
// graph: where it does, the hooks are parked during the recompute's backward and run once in that outer call (with
// .grad complete); where it does not, they run inside.
struct ReturnsNoGradient : public torch::autograd::Function<ReturnsNoGradient> {
  static torch::Tensor forward(AutogradContext* /*ctx*/, const torch::Tensor& input) { return input.clone(); }
  static variable_list backward(AutogradContext* /*ctx*/, variable_list /*grad_outputs*/) { return {torch::Tensor()}; }
};

class SetsFlag final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit SetsFlag(bool* flag) : flag_(flag) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { *flag_ = true; }

 private:
  bool* flag_;
};

bool post_accumulate_hooks_run_without_gradient() {
  static const bool runs = [] {
    torch::AutoGradMode grad_mode(true);
    bool ran = false;
    torch::Tensor leaf = torch::zeros({1}).requires_grad_(true);
    torch::autograd::impl::set_post_acc_grad_hooks(leaf, std::make_unique<SetsFlag>(&ran));
    ReturnsNoGradient::apply(leaf).sum().backward();
    torch::autograd::impl::set_post_acc_grad_hooks(leaf, nullptr);
    return ran;
  }();
  return runs;
}

// Takes the post-accumulate-grad hooks off `params` for its lifetime (see above); puts them back on exit.
class ParkedPostAccumulateHooks {
 public:
  explicit ParkedPostAccumulateHooks(const std::vector<torch::Tensor>& params) {
    for (const auto& param : params) {
      auto& hook = torch::autograd::impl::post_acc_grad_hooks(param);
      if (hook != nullptr) parked_.emplace_back(param, std::move(hook));
    }
  }
  ~ParkedPostAccumulateHooks() {
    for (auto& [param, hook] : parked_) torch::autograd::impl::set_post_acc_grad_hooks(param, std::move(hook));
  }
  ParkedPostAccumulateHooks(const ParkedPostAccumulateHooks&) = delete;
  ParkedPostAccumulateHooks& operator=(const ParkedPostAccumulateHooks&) = delete;

 private:
  std::vector<std::pair<torch::Tensor, std::unique_ptr<torch::autograd::PostAccumulateGradHook>>> parked_;
};

// Whether the backward running now accumulates every leaf's gradient into .grad (a plain `backward()`: its graph
// task runs the whole graph, so its exec_info is empty) and every parameter among `saved` from `params_begin` on is a
// leaf: then a checkpointed block's parameter gradients may be accumulated inside its recompute's backward, exactly
// as the outer pass would. autograd::grad, or backward with `inputs`, runs a pruned graph (non-empty exec_info) and
// takes the gradients as returned values.
bool accumulates_every_leaf(const variable_list& saved, size_t params_begin) {
  const auto* exec_info = torch::autograd::get_current_graph_task_exec_info();
  if (exec_info == nullptr || !exec_info->empty()) return false;
  return std::all_of(saved.begin() + static_cast<std::ptrdiff_t>(params_begin), saved.end(),
                     [](const torch::Tensor& param) { return param.is_leaf(); });
}

// saved_data holds IValues only; a capsule ties the function's lifetime to the autograd node, so a graph that is
// dropped without backward frees it too. (Capsules are an internal IValue kind, but stable from 1.13 to 2.x.)
struct FunctionHolder : torch::CustomClassHolder {
  explicit FunctionHolder(nn::RegionFunction f) : function(std::move(f)) {}
  nn::RegionFunction function;
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

// Pinned CPU copy of a device tensor, written asynchronously: the copy is queued on the current stream, so it
// finishes before anything later on that stream could reuse the device memory, and the host does not wait.
torch::Tensor offload_to_pinned_cpu(const torch::Tensor& tensor) {
  torch::Tensor host = torch::empty(tensor.sizes(), tensor.options().device(torch::kCPU).pinned_memory(true));
  host.copy_(tensor, /*non_blocking=*/true);
  return host;
}

// Autograd sees the function as one node whose inputs are (function, inputs..., params..., saved): `inputs` and
// `params` travel as TensorLists because Function::apply unpacks a TensorList into one input edge per tensor (a
// std::vector<Tensor> would be taken as an opaque non-tensor argument), and that is what makes gradients flow
// back. Edges count tensors only: input i is edge i, param j is edge num_inputs + j.
class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const nn::RegionFunction& function, at::TensorList inputs,
                               at::TensorList params, SavedInputs saved) {
    ctx->saved_data["function"] = c10::IValue::make_capsule(c10::make_intrusive<FunctionHolder>(function));
    ctx->saved_data["num_inputs"] = static_cast<int64_t>(inputs.size());
    ctx->saved_data["cpu_rng"] = get_rng_state(at::detail::getDefaultCPUGenerator());
    c10::optional<torch::Device> cuda_device;
    for (const auto& input : inputs) {
      if (input.is_cuda()) {
        cuda_device = input.device();
        break;
      }
    }
    // Under CUDA graph capture the generator's state cannot be read (LibTorch refuses): the captured step
    // (train/cuda_graph_step.h) is one without device randomness, so the recompute has no draws to repeat there.
    if (cuda_device && !cuda_stream_capturing()) {
      ctx->saved_data["cuda_rng"] = get_rng_state(at::globalContext().defaultGenerator(*cuda_device));
      ctx->saved_data["cuda_device"] = static_cast<int64_t>(cuda_device->index());
    }
    const auto autocast = precision::AutocastState::current();
    ctx->saved_data["autocast_cpu"] = autocast.cpu_enabled;
    ctx->saved_data["autocast_cpu_dtype"] = static_cast<int64_t>(autocast.cpu_dtype);
    ctx->saved_data["autocast_cuda"] = autocast.cuda_enabled;
    ctx->saved_data["autocast_cuda_dtype"] = static_cast<int64_t>(autocast.cuda_dtype);

    // Params are saved too, not only the inputs: their version counters then catch an optimizer step taken
    // between forward and backward, which would make the recompute silently use different weights.
    variable_list to_save;
    if (saved == SavedInputs::offloaded_cpu) {
      // Offloaded inputs live in saved_data (as plain CPU tensors, outside autograd's version checks); each
      // remembers its device so backward can bring it back.
      std::vector<torch::Tensor> host;
      std::vector<int64_t> device_indices;
      for (const auto& input : inputs) {
        if (!input.is_cuda()) {
          throw UsageError(fmt::format(
              "checkpointing.policy offload needs a CUDA device; use full on CPU (a saved block input is on {})",
              input.device().str()));
        }
        host.push_back(offload_to_pinned_cpu(input.detach()));
        device_indices.push_back(input.device().index());
      }
      ctx->saved_data["offloaded"] = host;
      ctx->saved_data["offloaded_devices"] = device_indices;
    } else {
      to_save.insert(to_save.end(), inputs.begin(), inputs.end());
    }
    to_save.insert(to_save.end(), params.begin(), params.end());
    ctx->save_for_backward(to_save);

    torch::Tensor output;
    {
      torch::NoGradGuard no_grad;
      AutocastCacheDisabled no_cache;
      output = function(inputs.vec());
    }
    // A function that returns an input or a view of it would make the output alias a saved tensor: an in-place
    // op downstream would then bump the saved input's version and break backward. A copy keeps them apart.
    bool aliases = false;
    for (const auto& input : inputs) aliases = aliases || output.is_alias_of(input);
    for (const auto& param : params) aliases = aliases || output.is_alias_of(param);
    if (aliases) output = output.clone();

    ctx->saved_data["output_sizes"] = output.sizes().vec();
    ctx->saved_data["output_dtype"] = static_cast<int64_t>(output.scalar_type());
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto num_inputs = static_cast<size_t>(ctx->saved_data["num_inputs"].toInt());
    const bool offloaded = ctx->saved_data.count("offloaded") != 0;
    std::vector<torch::Tensor> inputs;
    if (offloaded) {
      const auto host = ctx->saved_data["offloaded"].toTensorVector();
      const auto devices = ctx->saved_data["offloaded_devices"].toIntVector();
      for (size_t i = 0; i < host.size(); ++i) {
        // Queued on the current stream ahead of the recompute that reads it; the host does not wait.
        const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(devices[i]));
        inputs.push_back(host[i].to(device, host[i].scalar_type(), /*non_blocking=*/true));
      }
    } else {
      inputs.assign(saved.begin(), saved.begin() + static_cast<std::ptrdiff_t>(num_inputs));
    }
    const size_t params_begin = offloaded ? 0 : num_inputs;
    const size_t num_params = saved.size() - params_begin;
    auto holder = ctx->saved_data["function"].toCapsule();
    const auto& function = static_cast<FunctionHolder*>(holder.get())->function;

    // Only what this backward pass asks for is computed, so an outer autograd::grad w.r.t. the input alone
    // does no parameter work, and inputs that need no gradient (a mask) are not differentiated.
    std::vector<torch::Tensor> wrt;
    std::vector<size_t> wrt_edge;
    std::vector<torch::Tensor> detached(num_inputs);
    for (size_t i = 0; i < num_inputs; ++i) {
      detached[i] = inputs[i].detach();
      if (ctx->needs_input_grad(i) && (detached[i].is_floating_point() || detached[i].is_complex())) {
        detached[i].requires_grad_(true);
        wrt.push_back(detached[i]);
        wrt_edge.push_back(i);
      }
    }
    for (size_t j = 0; j < num_params; ++j) {
      const torch::Tensor& param = saved[params_begin + j];
      if (ctx->needs_input_grad(num_inputs + j) && param.requires_grad()) {
        wrt.push_back(param);
        wrt_edge.push_back(num_inputs + j);
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
      nn::RecomputeScope recomputing;
      output = function(detached);
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

    // Slot 0 answers the (non-tensor) function argument, then inputs, then params, then the (non-tensor)
    // `saved` argument, as apply() laid them out.
    variable_list grads(1 + num_inputs + num_params + 1);
    if (!wrt.empty() && output.requires_grad()) {
      // What torch::autograd::grad({output}, wrt, ...) does, from the output's graph edge rather than the output:
      // the recomputed output is needed for its place in the graph, not its values, so its storage goes before the
      // block's backward runs instead of being held through it (a block's output, fp32 [tokens, hidden]: 6 MiB at
      // Latte-S/2's 4096 tokens, at the step's memory peak).
      const torch::autograd::edge_list roots{torch::autograd::impl::gradient_edge(output)};
      output.reset();
      torch::autograd::edge_list wanted;
      wanted.reserve(wrt.size());
      for (const auto& tensor : wrt) wanted.push_back(torch::autograd::impl::gradient_edge(tensor));
      auto& engine = torch::autograd::Engine::get_default_engine();
      if (accumulates_every_leaf(saved, params_begin)) {
        // The parameters' gradients go into .grad inside this backward, each as soon as it is made (their
        // AccumulateGrad nodes, hooks and all, are the ones the outer pass would run): returned to the outer pass
        // they would all be held until the block's backward ends, beside .grad's earlier micro-batches under
        // gradient accumulation (the MLP's and o_proj's through the attention core's backward). The inputs'
        // gradients accumulate into their detached leaves and are returned.
        std::vector<torch::Tensor> params;
        for (size_t i = 0; i < wrt.size(); ++i) {
          if (wrt_edge[i] >= num_inputs) params.push_back(wrt[i]);
        }
        std::optional<ParkedPostAccumulateHooks> parked;
        if (post_accumulate_hooks_run_without_gradient()) parked.emplace(params);
        engine.execute(roots, {grad_outputs[0]}, /*keep_graph=*/false, /*create_graph=*/false,
                       /*accumulate_grad=*/true, wanted);
        for (size_t i = 0; i < wrt.size(); ++i) {
          if (wrt_edge[i] < num_inputs) grads[wrt_edge[i] + 1] = detached[wrt_edge[i]].grad();
        }
      } else {
        const variable_list computed = engine.execute(roots, {grad_outputs[0]}, /*keep_graph=*/false,
                                                      /*create_graph=*/false, /*accumulate_grad=*/false, wanted);
        for (size_t i = 0; i < wrt.size(); ++i) grads[wrt_edge[i] + 1] = computed[i];
      }
    }
    return grads;
  }
};

}  // namespace

torch::Tensor checkpoint(const nn::RegionFunction& function, const std::vector<torch::Tensor>& inputs,
                         const std::vector<torch::Tensor>& params, SavedInputs saved) {
  if (!torch::GradMode::is_enabled()) return function(inputs);
  bool any_requires_grad = false;
  for (const auto& input : inputs) any_requires_grad = any_requires_grad || input.requires_grad();
  for (const auto& param : params) any_requires_grad = any_requires_grad || param.requires_grad();
  // Nothing to differentiate: checkpointing would only add the recompute bookkeeping.
  if (!any_requires_grad) return function(inputs);
  // Probed here, under gradients and outside any backward, rather than in the first backward that needs it.
  post_accumulate_hooks_run_without_gradient();
  return CheckpointFunction::apply(function, at::TensorList(inputs), at::TensorList(params), saved);
}

torch::Tensor checkpoint(const nn::BlockFunction& block, const torch::Tensor& input,
                         const std::vector<torch::Tensor>& params) {
  // `block` copied into the closure: the autograd node keeps it until backward.
  return checkpoint([block](const std::vector<torch::Tensor>& inputs) { return block(inputs[0]); }, {input}, params);
}

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
    case Policy::selective:
      return "selective";
    case Policy::offload:
      return "offload";
  }
  return "off";
}

namespace {

constexpr Policy kPolicies[] = {Policy::off, Policy::full, Policy::every_k, Policy::sqrt, Policy::selective,
                                Policy::offload};

void check_offload_possible() {
  if (!torch::cuda::is_available()) {
    throw UsageError(
        "checkpointing.policy offload needs a CUDA device; use full on CPU (no CUDA device is available to this "
        "LibTorch build)");
  }
}

}  // namespace

Policy parse_policy(const std::string& name) {
  for (Policy policy : kPolicies) {
    if (name == policy_name(policy)) {
      if (policy == Policy::offload) check_offload_possible();
      return policy;
    }
  }
  throw UsageError(fmt::format(
      "checkpointing.policy: unknown policy '{}'; valid policies: off, full, every_k, sqrt, selective, offload", name));
}

CheckpointRunner::CheckpointRunner(CheckpointOptions options, int64_t num_blocks)
    : options_(options), num_blocks_(num_blocks), checkpointed_(static_cast<size_t>(std::max<int64_t>(num_blocks, 0))) {
  if (num_blocks < 0) throw Error(fmt::format("checkpoint: num_blocks must be >= 0, got {}", num_blocks));
  if (options_.policy == Policy::every_k && options_.k < 1) {
    throw UsageError(fmt::format("checkpointing.k: must be >= 1 for policy every_k, got {}", options_.k));
  }
  switch (options_.policy) {
    case Policy::off:
    case Policy::selective:  // blocks run plainly; only their regions are recomputed
      break;
    case Policy::offload:
      check_offload_possible();
      checkpointed_.assign(checkpointed_.size(), true);
      break;
    case Policy::full:
      checkpointed_.assign(checkpointed_.size(), true);
      break;
    case Policy::every_k:
      for (int64_t i = 0; i < num_blocks_; i += options_.k) checkpointed_[i] = true;
      break;
    case Policy::sqrt:
      // Every block is recomputed; only the input of each ceil(sqrt(L))-block segment is kept, so forward keeps
      // about sqrt(L) block inputs and backward holds one segment's activations at a time.
      segment_size_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(num_blocks_)))));
      checkpointed_.assign(checkpointed_.size(), true);
      break;
  }
}

torch::Tensor CheckpointRunner::run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                                    const std::vector<torch::Tensor>& params) {
  if (!is_checkpointed(block_index)) return block(input);
  if (options_.policy == Policy::offload) {
    return checkpoint([block](const std::vector<torch::Tensor>& inputs) { return block(inputs[0]); }, {input}, params,
                      SavedInputs::offloaded_cpu);
  }
  return checkpoint(block, input, params);
}

torch::Tensor CheckpointRunner::run_stack(int64_t count, const nn::StackFunction& block, const torch::Tensor& input,
                                          const nn::StackParamsFunction& params_of) {
  if (count != num_blocks_) {
    throw Error(fmt::format("checkpoint: run_stack over {} blocks, but the runner was built for {} blocks", count,
                            num_blocks_));
  }
  if (options_.policy != Policy::sqrt) return BlockRunner::run_stack(count, block, input, params_of);
  torch::Tensor hidden = input;
  for (int64_t begin = 0; begin < count; begin += segment_size_) {
    const int64_t end = std::min(count, begin + segment_size_);
    std::vector<torch::Tensor> params;
    for (int64_t i = begin; i < end; ++i) {
      // A tensor several blocks take (a model's conditioning, listed with each block's parameters) is one edge
      // of the segment: listed twice, its gradient would be returned, and summed, twice.
      for (auto& param : params_of(i)) {
        const bool listed = std::any_of(params.begin(), params.end(),
                                        [&param](const torch::Tensor& other) { return other.is_same(param); });
        if (!listed) params.push_back(std::move(param));
      }
    }
    // `block` copied into the closure: the autograd node keeps it until backward.
    auto segment = [block, begin, end](const std::vector<torch::Tensor>& inputs) {
      torch::Tensor h = inputs[0];
      for (int64_t i = begin; i < end; ++i) {
        // In the recompute, every block but the segment's last keeps its graph while the later ones are
        // differentiated: its layers take their forms for graphs kept until backward (nn::SegmentBlockScope).
        std::optional<nn::SegmentBlockScope> outlives_its_backward;
        if (i + 1 < end) outlives_its_backward.emplace();
        h = block(i, h);
      }
      return h;
    };
    hidden = checkpoint(segment, {hidden}, params);
  }
  return hidden;
}

torch::Tensor CheckpointRunner::run_region(nn::RegionKind, const nn::RegionFunction& region,
                                           const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& params) {
  if (options_.policy != Policy::selective) return region(inputs);
  return checkpoint(region, inputs, params);
}

bool CheckpointRunner::recomputes(nn::RegionKind) const { return options_.policy == Policy::selective; }

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
  switch (options_.policy) {
    case Policy::off:
      return "off";
    case Policy::selective:
      return fmt::format("on, policy selective (norms, attention core, activations recomputed), {} blocks", num_blocks_);
    case Policy::every_k:
      return fmt::format("on, policy every_k (k={}), {}/{} blocks", options_.k, checkpointed_blocks(), num_blocks_);
    case Policy::sqrt: {
      const int64_t segments = (num_blocks_ + segment_size_ - 1) / segment_size_;
      return fmt::format("on, policy sqrt ({} segments of up to {} blocks, segment inputs kept), {}/{} blocks",
                         segments, segment_size_, checkpointed_blocks(), num_blocks_);
    }
    case Policy::offload:
      return fmt::format("on, policy offload (block inputs kept in pinned CPU memory), {}/{} blocks",
                         checkpointed_blocks(), num_blocks_);
    case Policy::full:
      break;
  }
  return fmt::format("on, policy {}, {}/{} blocks", policy_name(options_.policy), checkpointed_blocks(), num_blocks_);
}

}  // namespace tune::memory
