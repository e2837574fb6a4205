// Our own safetensors reader and writer (format: 8-byte little-endian header size, JSON header, raw data).
// Every offset, size and dtype in the header is checked against the file before any tensor is read.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tune::io {

struct TensorEntry {
  torch::ScalarType dtype;     // F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL supported
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;     // offsets relative to the start of the data section
  uint64_t data_end = 0;
};

class SafetensorsFile {
 public:
  // Parses and validates the header; throws tune::InputError naming the file and, where relevant, the tensor:
  // truncated file, header size beyond the file, malformed JSON, unknown dtype, offsets outside the data
  // section or not matching dtype x shape, overlapping tensors.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }

  // Reads one tensor (CPU, the file's dtype). Throws InputError naming the file and tensor if absent.
  torch::Tensor load(const std::string& name) const;

 private:
  std::filesystem::path path_;
  uint64_t data_offset_ = 0;  // byte offset of the data section in the file
  std::map<std::string, TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any device; copied to CPU, made contiguous) in the order given, with optional metadata
// (e.g. {"format": "pt"}). Writes to `path` + ".tmp" then renames, so a crash never leaves a torn file.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace tune::io
