// Strategy full_shard: units of flat parameters, the hooks that gather and reduce them, and the block runner
// wrapper (see fully_sharded.h).
#include "tune/distributed/fully_sharded.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <tuple>

#include "tune/core/error.h"

namespace tune::distributed {

namespace {

struct Unit {
  std::string name;
  std::vector<std::unique_ptr<FlatParameter>> flats;
  std::vector<torch::Tensor> trainable;  // the unit's trainable parameters (their hooks count arrivals)
  int64_t pending = 0;                   // trainable gradients not yet accumulated in this backward
  bool expect_input_grad = false;        // a plain (not recomputed) backward also computes the block input's grad
  bool input_grad_done = false;

  void reset_backward() {
    pending = static_cast<int64_t>(trainable.size());
    expect_input_grad = false;
    input_grad_done = false;
  }
  bool partial() const { return pending != static_cast<int64_t>(trainable.size()) || input_grad_done; }
};

// Groups a unit's parameters into flat parameters by (dtype, device, trainable, matrix), keeping their order.
std::vector<std::unique_ptr<FlatParameter>> make_flats(const ShardUnitSpec& spec, ProcessGroup& group) {
  using Key = std::tuple<int, std::string, bool, bool>;
  std::map<Key, std::vector<std::pair<std::string, torch::Tensor>>> groups;
  std::vector<Key> order;
  for (const auto& [name, param] : spec.params) {
    const Key key{static_cast<int>(param.scalar_type()), param.device().str(), param.requires_grad(), param.dim() >= 2};
    if (groups.find(key) == groups.end()) order.push_back(key);
    groups[key].emplace_back(name, param);
  }
  std::vector<std::unique_ptr<FlatParameter>> flats;
  for (const auto& key : order) {
    const std::string name = fmt::format("{}.flat_{}_{}_{}", spec.name, c10::toString(static_cast<c10::ScalarType>(std::get<0>(key))),
                                         std::get<2>(key) ? "trainable" : "frozen", std::get<3>(key) ? "matrices" : "vectors");
    flats.push_back(std::make_unique<FlatParameter>(name, groups[key], group));
  }
  return flats;
}

}  // namespace

struct FullyShardedParameters::State {
  ProcessGroup* group = nullptr;
  torch::ScalarType reduce_dtype = torch::kFloat32;
  bool prefetching = false;  // distributed.prefetch
  int64_t prefetched_units = 0;
  std::vector<Unit> units;          // wrapped blocks in block order, then the rest
  std::vector<int64_t> unit_of_block;  // block index -> unit index, -1 when the block is not wrapped
  std::vector<FlatParameter*> in_flight;
  std::recursive_mutex mutex;

  Unit& rest() { return units.back(); }

  void gather(Unit& unit) {
    for (auto& flat : unit.flats) flat->gather();
  }
  void release(Unit& unit) {
    for (auto& flat : unit.flats) flat->release();
  }
  bool resident(const Unit& unit) const {
    for (const auto& flat : unit.flats) {
      if (flat->resident()) return true;
    }
    return false;
  }
  bool is_block_unit(int64_t index) const { return index >= 0 && index + 1 < static_cast<int64_t>(units.size()); }

  // Starts gathering a block's unit without waiting, so its all-gather overlaps the compute of the block before it
  // (forward) or after it (backward). Every rank prefetches at the same points of the same graph, so the
  // collectives stay in one order on all ranks.
  void prefetch(int64_t index) {
    if (!prefetching || !is_block_unit(index)) return;
    Unit& unit = units[static_cast<size_t>(index)];
    if (resident(unit)) return;
    for (auto& flat : unit.flats) flat->start_gather();
    ++prefetched_units;
  }
  // In backward, after a unit's completion released it: the block whose backward runs after the next one. The
  // next one (index - 1) is already gathered when a plain backward gathered it through its output's hook, just
  // before this completion; with a recompute it is not yet, and is the one to prefetch. So at most two block units
  // are resident at once (sft/peak_prediction.cpp budgets two).
  void prefetch_before(int64_t index) {
    for (int64_t candidate = index - 1; candidate >= std::max<int64_t>(0, index - 2); --candidate) {
      if (!resident(units[static_cast<size_t>(candidate)])) {
        prefetch(candidate);
        return;
      }
    }
  }

  // The unit's backward is over: its gradients leave for their reduce-scatter (the previous unit's reduction is
  // waited for first, so at most one is in flight) and its parameters are released. `in_backward`: called from a
  // backward hook, where the next block's gather may be prefetched (not when settling after backward).
  void complete(Unit& unit, bool in_backward = false) {
    bool any_trainable = false;
    for (auto& flat : unit.flats) any_trainable = any_trainable || flat->trainable();
    if (any_trainable) {
      for (auto* flat : in_flight) flat->finish_reduction();
      in_flight.clear();
      for (auto& flat : unit.flats) {
        if (!flat->trainable()) continue;
        flat->start_reduction(reduce_dtype);
        in_flight.push_back(flat.get());
      }
    }
    release(unit);
    unit.reset_backward();
    const int64_t index = &unit - units.data();
    // Only a block's completion prefetches: the rest unit completes when backward ends (embeddings last).
    if (in_backward && is_block_unit(index)) prefetch_before(index);
  }

  void maybe_complete(Unit& unit) {
    if (unit.pending == 0 && (!unit.expect_input_grad || unit.input_grad_done)) complete(unit, true);
  }

  void on_gradient_accumulated(int64_t unit_index) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    Unit& unit = units[static_cast<size_t>(unit_index)];
    if (unit.pending <= 0) {
      throw Error(fmt::format("internal: unit {} got more gradients than it has trainable parameters in one "
                              "backward pass", unit.name));
    }
    --unit.pending;
    maybe_complete(unit);
  }

  void on_input_gradient(int64_t unit_index) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    Unit& unit = units[static_cast<size_t>(unit_index)];
    unit.input_grad_done = true;
    maybe_complete(unit);
  }

  void on_output_gradient(int64_t unit_index) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    gather(units[static_cast<size_t>(unit_index)]);
  }

  // Units left incomplete by a backward (a parameter that got no gradient): reduced now, in unit order on every
  // rank.
  void settle() {
    for (auto& unit : units) {
      if (unit.partial()) complete(unit);
    }
  }
};

namespace {

class GradientArrived : public torch::autograd::PostAccumulateGradHook {
 public:
  GradientArrived(std::weak_ptr<FullyShardedParameters::State> state, int64_t unit)
      : state_(std::move(state)), unit_(unit) {}
  void operator()(const torch::autograd::Variable& /*param*/) override {
    if (auto state = state_.lock()) state->on_gradient_accumulated(unit_);
  }

 private:
  std::weak_ptr<FullyShardedParameters::State> state_;
  int64_t unit_;
};

// Calls a wrapped block with its unit gathered; see fully_sharded.h for when the unit is released again.
torch::Tensor call_block(const std::shared_ptr<FullyShardedParameters::State>& state, int64_t block,
                         const torch::Tensor& input, const std::function<torch::Tensor(const torch::Tensor&)>& run) {
  const int64_t unit_index = state->unit_of_block.at(static_cast<size_t>(block));
  if (unit_index < 0) return run(input);
  Unit& unit = state->units[static_cast<size_t>(unit_index)];
  const bool recompute = nn::RecomputeScope::active();
  const bool recording = torch::GradMode::is_enabled() && !recompute;
  {
    std::lock_guard<std::recursive_mutex> lock(state->mutex);
    state->gather(unit);
    if (!recompute) state->prefetch(unit_index + 1);
  }
  std::weak_ptr<FullyShardedParameters::State> weak = state;
  if (recording && input.requires_grad()) {
    unit.expect_input_grad = true;
    input.register_hook([weak, unit_index](const torch::Tensor&) {
      if (auto s = weak.lock()) s->on_input_gradient(unit_index);
    });
  }
  torch::Tensor output = run(input);
  if (recording && output.requires_grad()) {
    output.register_hook([weak, unit_index](const torch::Tensor&) {
      if (auto s = weak.lock()) s->on_output_gradient(unit_index);
    });
  }
  // A recompute keeps the parameters for the backward that follows it; the unit's completion releases them.
  if (!recompute) {
    std::lock_guard<std::recursive_mutex> lock(state->mutex);
    state->release(unit);
  }
  return output;
}

class ShardedBlockRunner : public nn::BlockRunner {
 public:
  ShardedBlockRunner(std::shared_ptr<FullyShardedParameters::State> state, std::shared_ptr<nn::BlockRunner> inner)
      : state_(std::move(state)), inner_(std::move(inner)) {}

  torch::Tensor run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override {
    auto wrapped = [state = state_, block_index, block](const torch::Tensor& x) {
      return call_block(state, block_index, x, block);
    };
    return inner_->run(block_index, wrapped, input, params);
  }

  torch::Tensor run_stack(int64_t count, const nn::StackFunction& block, const torch::Tensor& input,
                          const nn::StackParamsFunction& params_of) override {
    auto wrapped = [state = state_, block](int64_t i, const torch::Tensor& x) {
      return call_block(state, i, x, [&block, i](const torch::Tensor& h) { return block(i, h); });
    };
    return inner_->run_stack(count, wrapped, input, params_of);
  }

  torch::Tensor run_region(nn::RegionKind kind, const nn::RegionFunction& region, const std::vector<torch::Tensor>& inputs,
                           const std::vector<torch::Tensor>& params) override {
    return inner_->run_region(kind, region, inputs, params);
  }
  bool recomputes(nn::RegionKind kind) const override { return inner_->recomputes(kind); }

 private:
  std::shared_ptr<FullyShardedParameters::State> state_;
  std::shared_ptr<nn::BlockRunner> inner_;
};

}  // namespace

FullyShardedParameters::FullyShardedParameters(ProcessGroup& group, const std::vector<ShardUnitSpec>& blocks,
                                               const ShardUnitSpec& rest, torch::ScalarType reduce_dtype,
                                               bool prefetch)
    : state_(std::make_shared<State>()) {
  auto& state = *state_;
  state.group = &group;
  state.reduce_dtype = reduce_dtype;
  state.prefetching = prefetch;
  state.units.reserve(blocks.size() + 1);
  auto add_unit = [&](const ShardUnitSpec& spec) {
    Unit unit;
    unit.name = spec.name;
    for (const auto& [name, param] : spec.params) {
      if (param.requires_grad()) unit.trainable.push_back(param);
    }
    unit.flats = make_flats(spec, group);
    unit.reset_backward();
    const auto index = static_cast<int64_t>(state.units.size());
    for (const auto& param : unit.trainable) {
      torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<GradientArrived>(state_, index));
    }
    state.units.push_back(std::move(unit));
    return index;
  };
  for (const auto& block : blocks) state.unit_of_block.push_back(block.params.empty() ? -1 : add_unit(block));
  add_unit(rest);
}

FullyShardedParameters::~FullyShardedParameters() {
  for (auto& unit : state_->units) {
    for (const auto& param : unit.trainable) torch::autograd::impl::set_post_acc_grad_hooks(param, nullptr);
  }
}

std::shared_ptr<nn::BlockRunner> FullyShardedParameters::wrap(std::shared_ptr<nn::BlockRunner> inner) {
  return std::make_shared<ShardedBlockRunner>(state_, std::move(inner));
}

void FullyShardedParameters::gather_rest() {
  std::lock_guard<std::recursive_mutex> lock(state_->mutex);
  // A backward that left units incomplete (an unused parameter) settles them before the next forward.
  state_->settle();
  state_->gather(state_->rest());
}

void FullyShardedParameters::gather_all() {
  std::lock_guard<std::recursive_mutex> lock(state_->mutex);
  for (auto& unit : state_->units) state_->gather(unit);
}

void FullyShardedParameters::release_all() {
  std::lock_guard<std::recursive_mutex> lock(state_->mutex);
  for (auto& unit : state_->units) state_->release(unit);
}

void FullyShardedParameters::finish_gradients() {
  std::lock_guard<std::recursive_mutex> lock(state_->mutex);
  auto& state = *state_;
  state.settle();
  // A trainable unit that got no gradient at all this step is reduced as zeros (as ddp's reducer counts it).
  for (auto& unit : state.units) {
    bool missing = false;
    for (auto& flat : unit.flats) missing = missing || (flat->trainable() && !flat->shard().grad().defined());
    if (missing) state.complete(unit);
  }
  for (auto* flat : state.in_flight) flat->finish_reduction();
  state.in_flight.clear();
  for (auto& unit : state.units) state.release(unit);
}

std::vector<FlatParameter*> FullyShardedParameters::flat_parameters() {
  std::vector<FlatParameter*> flats;
  for (auto& unit : state_->units) {
    for (auto& flat : unit.flats) flats.push_back(flat.get());
  }
  return flats;
}

int64_t FullyShardedParameters::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& unit : state_->units) {
    for (const auto& flat : unit.flats) bytes += flat->shard_numel() * flat->bytes_per_element();
  }
  return bytes;
}

int64_t FullyShardedParameters::prefetched_units() const { return state_->prefetched_units; }

int64_t FullyShardedParameters::largest_unit_bytes() const {
  int64_t largest = 0;
  for (const auto& unit : state_->units) {
    int64_t bytes = 0;
    for (const auto& flat : unit.flats) bytes += flat->shard_numel() * state_->group->size() * flat->bytes_per_element();
    largest = std::max(largest, bytes);
  }
  return largest;
}

}  // namespace tune::distributed
