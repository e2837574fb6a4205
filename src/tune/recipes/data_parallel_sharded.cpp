// DataParallel's full_shard parts (see data_parallel.h): which blocks are wrapped, the flat shards the optimizer
// and EMA see, and checkpoint state moved between flat shards and whole per-parameter tensors.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "tune/core/error.h"
#include "tune/core/progress.h"
#include "tune/distributed/fully_sharded.h"
#include "tune/distributed/process_group.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/data_parallel.h"

namespace tune::recipes {

void validate_shard_blocks(const config::Config& config, const std::vector<std::string>& known) {
  const std::set<std::string> types(known.begin(), known.end());
  for (const auto& name : config.get_strings("distributed.shard_blocks")) {
    if (types.count(name) == 0) {
      config.fail("distributed.shard_blocks", fmt::format("names '{}', a block type this model does not have; its "
                                                          "block types are: {}", name, fmt::join(types, ", ")));
    }
  }
}

void DataParallel::check_shard_blocks(const config::Config& config, const ModelBlocks& blocks) {
  std::vector<std::string> known = blocks.types;
  for (const auto& [alias, type] : blocks.type_aliases) known.push_back(alias);
  validate_shard_blocks(config, known);
  const std::vector<std::string> wanted = settings_.shard_blocks.empty() ? blocks.default_types : settings_.shard_blocks;
  std::set<std::string> chosen;
  for (const auto& name : wanted) {
    const auto alias = blocks.type_aliases.find(name);
    chosen.insert(alias == blocks.type_aliases.end() ? name : alias->second);
  }
  wrapped_block_.clear();
  for (const auto& type : blocks.types) wrapped_block_.push_back(chosen.count(type) != 0);
}

void DataParallel::shard_model(const ModelBlocks& blocks) {
  // Which block each parameter belongs to, by identity (names differ between models).
  std::map<const void*, size_t> block_of;
  std::vector<distributed::ShardUnitSpec> specs(blocks.modules.size());
  for (size_t i = 0; i < blocks.modules.size(); ++i) {
    if (!wrapped_block_.at(i)) continue;
    for (const auto& item : blocks.modules[i]->named_parameters()) {
      block_of[item.value().unsafeGetTensorImpl()] = i;
    }
    for (const auto& item : blocks.modules[i]->named_buffers()) {  // NF4 weights
      block_of[item.value().unsafeGetTensorImpl()] = i;
    }
  }
  distributed::ShardUnitSpec rest{"rest", {}};
  std::set<const void*> seen;  // a tensor registered under two names (shared weights) is sharded once
  for (const auto& [name, tensor] : blocks.named_parameters) {
    if (!seen.insert(tensor.unsafeGetTensorImpl()).second) continue;
    const auto found = block_of.find(tensor.unsafeGetTensorImpl());
    if (found == block_of.end()) {
      rest.params.emplace_back(name, tensor);
      continue;
    }
    auto& spec = specs[found->second];
    if (spec.name.empty()) spec.name = name.substr(0, name.find_last_of('.'));  // refined below
    spec.params.emplace_back(name, tensor);
  }
  // A unit's name is the longest prefix its parameter names share ("model.layers.3"), for logs and state files.
  for (auto& spec : specs) {
    for (const auto& [name, tensor] : spec.params) {
      while (!spec.name.empty() && name.rfind(spec.name + ".", 0) != 0) {
        const auto dot = spec.name.find_last_of('.');
        spec.name = dot == std::string::npos ? "" : spec.name.substr(0, dot);
      }
    }
  }
  sharded_ = std::make_unique<distributed::FullyShardedParameters>(
      *distributed::world(), specs, rest, settings_.reduce_bf16 ? torch::kBFloat16 : torch::kFloat32,
      settings_.prefetch);
}

void DataParallel::finish_sharded_gradients() { sharded_->finish_gradients(); }

std::string DataParallel::describe_sharded() const {
  int64_t wrapped = 0;
  for (const bool w : wrapped_block_) wrapped += w ? 1 : 0;
  return fmt::format("{} processes, strategy full_shard: {} of {} blocks wrapped, the rest of the model one more "
                     "unit; this process holds {} of parameters as flat shards (1/{}), gathers at most {} at once "
                     "per unit, {}, gradients reduce-scattered in {}", size_, wrapped, wrapped_block_.size(),
                     format_bytes(static_cast<double>(sharded_->shard_bytes())), size_,
                     format_bytes(static_cast<double>(sharded_->largest_unit_bytes())),
                     settings_.prefetch ? "prefetching the next block's gather" : "no prefetch",
                     settings_.reduce_bf16 ? "bf16" : "fp32");
}

std::shared_ptr<nn::BlockRunner> DataParallel::block_runner(std::shared_ptr<nn::BlockRunner> inner) const {
  return sharded_ ? sharded_->wrap(std::move(inner)) : inner;
}

void DataParallel::before_forward() {
  if (sharded_) sharded_->gather_rest();
}

void DataParallel::release_parameters() {
  if (sharded_) sharded_->release_all();
}

std::vector<train::ParamGroup> DataParallel::optimizer_groups(const std::vector<train::NamedParameter>& params,
                                                              double weight_decay) const {
  if (!sharded_) return train::make_param_groups(optimizer_share(params), weight_decay);
  // The flat shards are 1-D; whether their parameters are matrices decides the decay (make_param_groups' rule).
  train::ParamGroup decayed, plain;
  decayed.weight_decay = weight_decay;
  for (auto* flat : sharded_->flat_parameters()) {
    if (!flat->trainable()) continue;
    (flat->matrices() ? decayed : plain).params.push_back({flat->name(), flat->shard()});
  }
  std::vector<train::ParamGroup> groups;
  for (auto* group : {&decayed, &plain}) {
    if (!group->params.empty()) groups.push_back(*group);
  }
  return groups;
}

int64_t DataParallel::bytes_per_process(int64_t whole, bool trainable_only) const {
  if (!sharded_) return whole;
  // The flat shards, plus what `whole` counts that no flat parameter holds (QLoRA's NF4 code books stay whole).
  int64_t shards = 0, sharded_whole = 0;
  for (auto* flat : sharded_->flat_parameters()) {
    if (!flat->trainable() && trainable_only) continue;
    shards += flat->shard_numel() * flat->bytes_per_element();
    sharded_whole += flat->numel() * flat->bytes_per_element();
  }
  return shards + std::max<int64_t>(0, whole - sharded_whole);
}

std::vector<train::NamedParameter> DataParallel::trainable_shards() const {
  std::vector<train::NamedParameter> shards;
  for (auto* flat : sharded_->flat_parameters()) {
    if (flat->trainable()) shards.push_back({flat->name(), flat->shard()});
  }
  return shards;
}

std::vector<torch::Tensor> DataParallel::gradient_tensors(const std::vector<torch::Tensor>& params) const {
  if (!sharded_) return params;
  std::vector<torch::Tensor> shards;
  for (const auto& shard : trainable_shards()) shards.push_back(shard.tensor);
  return shards;
}

std::vector<train::NamedParameter> DataParallel::ema_parameters(const std::vector<train::NamedParameter>& params) const {
  return sharded_ ? trainable_shards() : params;
}

std::vector<std::pair<std::string, torch::Tensor>> DataParallel::whole_state(
    const std::vector<std::pair<std::string, torch::Tensor>>& shard_state) const {
  if (!sharded_) return shard_state;
  const std::map<std::string, torch::Tensor> by_name(shard_state.begin(), shard_state.end());
  std::vector<std::pair<std::string, torch::Tensor>> whole;
  for (auto* flat : sharded_->flat_parameters()) {
    const auto found = by_name.find(flat->name());
    if (found == by_name.end()) continue;
    for (auto& entry : flat->split(flat->gather_whole(found->second))) whole.push_back(std::move(entry));
  }
  return whole;
}

std::vector<std::pair<std::string, torch::Tensor>> DataParallel::shard_state(
    const std::vector<std::pair<std::string, torch::Tensor>>& whole) const {
  if (!sharded_) return whole;
  const std::map<std::string, torch::Tensor> by_name(whole.begin(), whole.end());
  std::vector<std::pair<std::string, torch::Tensor>> shards;
  for (auto* flat : sharded_->flat_parameters()) {
    if (!flat->trainable()) continue;
    std::vector<torch::Tensor> pieces;
    for (const auto& [name, shape] : flat->split(torch::empty({flat->numel()}))) {
      const auto found = by_name.find(name);
      if (found == by_name.end()) throw InputError(fmt::format("state entry '{}' is missing", name));
      if (found->second.sizes() != shape.sizes()) {
        throw InputError(fmt::format("state entry '{}' has shape [{}], expected [{}]", name,
                                     fmt::join(found->second.sizes(), ", "), fmt::join(shape.sizes(), ", ")));
      }
      pieces.push_back(found->second.reshape({-1}).to(flat->shard().scalar_type()));
    }
    shards.emplace_back(flat->name(), flat->slice_of(torch::cat(pieces)));
  }
  return shards;
}

void DataParallel::gather_parameters() {
  if (sharded_) sharded_->gather_all();
}

void DataParallel::reshard_parameters() {
  if (!sharded_) return;
  torch::NoGradGuard no_grad;
  for (auto* flat : sharded_->flat_parameters()) flat->shard().detach().copy_(flat->slice_of(flat->flatten_parameters()));
  sharded_->release_all();
}

std::vector<std::pair<std::string, torch::Tensor>> DataParallel::read_sharded_optimizer_state(
    const std::filesystem::path& dir) const {
  // Every rank file, in rank order: entries "<flat>.<field>" hold that rank's shard of the flat's state under the
  // world size that wrote them; the whole vector is their concatenation without the padding.
  std::vector<std::map<std::string, torch::Tensor>> files;
  bool flat_entries = false;
  for (const auto& name : optimizer_state_files(dir)) {
    const auto tensors = read_optimizer_file(dir, name);
    for (const auto& entry : tensors) flat_entries = flat_entries || entry.first.find(".flat_") != std::string::npos;
    files.emplace_back(tensors.begin(), tensors.end());
  }
  if (!flat_entries) {
    throw InputError(fmt::format("{}: its optimizer state is per parameter, written by a single process or by "
                                 "distributed.strategy ddp or shard_grad_op, which full_shard cannot read (it resumes "
                                 "full_shard checkpoints only); resume this one with ddp or shard_grad_op",
                                 dir.string()));
  }
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (auto* flat : sharded_->flat_parameters()) {
    if (!flat->trainable()) continue;
    for (const char* field : {"exp_avg", "exp_avg_sq"}) {
      const std::string key = flat->name() + "." + field;
      std::vector<torch::Tensor> pieces;
      for (const auto& file : files) {
        const auto found = file.find(key);
        if (found == file.end()) {
          throw InputError(fmt::format("{}: optimizer state has no '{}' in every rank's file: the model, its LoRA "
                                       "targets or distributed.shard_blocks differ from the run that wrote it",
                                       dir.string(), key));
        }
        pieces.push_back(found->second.reshape({-1}));
      }
      const auto whole = torch::cat(pieces);
      if (whole.numel() < flat->numel()) {
        throw InputError(fmt::format("{}: optimizer state '{}' holds {} elements, expected at least {}: the model, its "
                                     "LoRA targets or distributed.shard_blocks differ from the run that wrote it",
                                     dir.string(), key, whole.numel(), flat->numel()));
      }
      state.emplace_back(key, flat->slice_of(whole.narrow(0, 0, flat->numel())));
    }
    const std::string step_key = flat->name() + ".step";
    const auto found = files.front().find(step_key);
    if (found == files.front().end()) throw InputError(fmt::format("{}: optimizer state has no '{}'", dir.string(), step_key));
    state.emplace_back(step_key, found->second);
  }
  return state;
}

}  // namespace tune::recipes
