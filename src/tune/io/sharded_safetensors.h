// Writing a model's weights as Hugging Face does: one model.safetensors, or, above a shard size, shards named
// model-00001-of-0000N.safetensors listed in model.safetensors.index.json ({"metadata": {"total_size": bytes},
// "weight_map": {tensor: shard}}), which transformers, llama.cpp's converter and io::WeightSource all read.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tune::io {

// transformers' default max_shard_size ("5GB", decimal).
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ULL;

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  torch::ScalarType dtype;  // as written (the loader must return this dtype)
};

// Writes `tensors` into `dir` in the order given. Shards are filled greedily in order, a new one started when the
// next tensor would take the current one past `max_shard_bytes` (a tensor larger than that gets a shard of its own),
// as transformers' save_pretrained does. `load` returns one tensor's data when its shard is written, so at most one
// shard is in memory. Returns the files written (the index last when sharded).
std::vector<std::filesystem::path> save_sharded_safetensors(
    const std::filesystem::path& dir, const std::vector<TensorToWrite>& tensors,
    const std::function<torch::Tensor(const std::string&)>& load, uint64_t max_shard_bytes = kDefaultMaxShardBytes);

// Parses a size such as "5GB", "500MB", "2GiB" or "1000" (bytes) as transformers' max_shard_size does (KB/MB/GB
// decimal, KiB/MiB/GiB binary); nullopt when it is not one.
std::optional<uint64_t> parse_byte_size(const std::string& text);

}  // namespace tune::io
