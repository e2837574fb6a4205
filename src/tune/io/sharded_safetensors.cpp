#include "tune/io/sharded_safetensors.h"

#include <fmt/format.h>

#include <cctype>
#include <optional>

#include "tune/core/error.h"
#include "tune/io/json_file.h"
#include "tune/io/safetensors.h"

namespace tune::io {
namespace {

uint64_t byte_size(const TensorToWrite& tensor) {
  uint64_t elements = 1;
  for (const int64_t size : tensor.shape) elements *= static_cast<uint64_t>(size);
  return elements * static_cast<uint64_t>(c10::elementSize(tensor.dtype));
}

std::vector<std::vector<size_t>> plan_shards(const std::vector<TensorToWrite>& tensors, uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = byte_size(tensors[i]);
    if (shards.empty() || (current_bytes > 0 && current_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
      current_bytes = 0;
    }
    shards.back().push_back(i);
    current_bytes += bytes;
  }
  return shards;
}

}  // namespace

std::vector<std::filesystem::path> save_sharded_safetensors(
    const std::filesystem::path& dir, const std::vector<TensorToWrite>& tensors,
    const std::function<torch::Tensor(const std::string&)>& load, uint64_t max_shard_bytes) {
  const auto shards = plan_shards(tensors, max_shard_bytes);
  std::vector<std::filesystem::path> written;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  for (size_t shard = 0; shard < shards.size(); ++shard) {
    const std::string file = shards.size() == 1 ? std::string("model.safetensors")
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1,
                                                              shards.size());
    std::vector<std::pair<std::string, torch::Tensor>> contents;
    for (const size_t i : shards[shard]) {
      torch::Tensor tensor = load(tensors[i].name);
      if (tensor.scalar_type() != tensors[i].dtype || tensor.sizes().vec() != tensors[i].shape) {
        throw Error(fmt::format("tensor '{}' to write has dtype {} and shape {}, but {} and {} were planned",
                                tensors[i].name, c10::toString(tensor.scalar_type()), c10::str(tensor.sizes()),
                                c10::toString(tensors[i].dtype), c10::str(c10::IntArrayRef(tensors[i].shape))));
      }
      contents.emplace_back(tensors[i].name, tensor);
      weight_map[tensors[i].name] = file;
      total_size += byte_size(tensors[i]);
    }
    save_safetensors(dir / file, contents, {{"format", "pt"}});
    written.push_back(dir / file);
  }
  if (shards.size() > 1) {
    write_json_file(dir / "model.safetensors.index.json",
                    {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}});
    written.push_back(dir / "model.safetensors.index.json");
  }
  return written;
}

std::optional<uint64_t> parse_byte_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  const uint64_t number = std::stoull(text.substr(0, digits));
  std::string unit;
  for (size_t i = digits; i < text.size(); ++i) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  const std::pair<const char*, uint64_t> units[] = {{"", 1},          {"B", 1},
                                                    {"KB", 1000ULL},  {"MB", 1000'000ULL}, {"GB", 1000'000'000ULL},
                                                    {"KIB", 1ULL << 10}, {"MIB", 1ULL << 20}, {"GIB", 1ULL << 30}};
  for (const auto& [name, scale] : units) {
    uint64_t bytes = 0;
    // 18 digits times a GB unit overflows 64 bits: no size at all, rather than a wrapped-around small one.
    if (unit == name) return __builtin_mul_overflow(number, scale, &bytes) ? std::nullopt : std::optional(bytes);
  }
  return std::nullopt;
}

}  // namespace tune::io
