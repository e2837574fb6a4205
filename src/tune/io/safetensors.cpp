// Safetensors reader: validates the whole header against the file on open, then reads single tensors on demand
// with seek + read, so a many-GB checkpoint is never read whole.
#include "tune/io/safetensors.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/io/dtypes.h"

namespace tune::io {
namespace {

// A header this large is a corrupt size field, not a real file (the reference implementation uses the same cap);
// refusing it avoids allocating gigabytes for garbage.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

using Json = nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw InputError(fmt::format("{}: {}", path.string(), what));
}

[[noreturn]] void fail_tensor(const std::filesystem::path& path, const std::string& name, const std::string& what) {
  throw InputError(fmt::format("{}: tensor '{}': {}", path.string(), name, what));
}

// The size field is little-endian by the format; assembling it byte by byte is correct on any host.
uint64_t read_header_size(std::ifstream& in, const std::filesystem::path& path) {
  unsigned char bytes[8];
  if (!in.read(reinterpret_cast<char*>(bytes), 8)) fail(path, "cannot read the 8-byte header size");
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = (size << 8) | bytes[i];
  return size;
}

// Parses the header JSON, rejecting duplicate top-level names (nlohmann would silently keep the last one).
Json parse_header(const std::string& text, const std::filesystem::path& path) {
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, on_event);
  } catch (const Json::exception& error) {  // parse_error, and out_of_range for a number like 1e999
    fail(path, fmt::format("the header is not valid JSON ({})", error.what()));
  }
  if (!duplicate.empty()) fail_tensor(path, duplicate, "appears more than once in the header");
  if (!header.is_object()) fail(path, fmt::format("the header must be a JSON object, found {}", header.type_name()));
  return header;
}

uint64_t read_unsigned(const Json& value, const std::filesystem::path& path, const std::string& name,
                       const std::string& field) {
  if (!value.is_number_unsigned()) {
    fail_tensor(path, name, fmt::format("{} must hold non-negative integers, found {}", field, value.dump()));
  }
  return value.get<uint64_t>();
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::filesystem::path& path) {
  if (!value.is_object()) fail(path, fmt::format("__metadata__ must be an object, found {}", value.type_name()));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      fail(path, fmt::format("__metadata__ entry '{}' must be a string, found {}", key, item.dump()));
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

TensorEntry parse_entry(const std::string& name, const Json& info, uint64_t data_size,
                        const std::filesystem::path& path) {
  if (!info.is_object()) fail_tensor(path, name, fmt::format("expected an object, found {}", info.dump()));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(field)) fail_tensor(path, name, fmt::format("the header entry has no '{}'", field));
  }
  TensorEntry entry;
  const Json& dtype = info["dtype"];
  auto scalar_type = dtype.is_string() ? dtype_from_safetensors_name(dtype.get<std::string>()) : std::nullopt;
  if (!scalar_type) {
    fail_tensor(path, name, fmt::format("unsupported dtype {}, expected one of {}", dtype.dump(),
                                        supported_safetensors_dtypes()));
  }
  entry.dtype = *scalar_type;

  const Json& shape = info["shape"];
  if (!shape.is_array()) fail_tensor(path, name, fmt::format("shape must be an array, found {}", shape.dump()));
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& dim : shape) {
    uint64_t size = read_unsigned(dim, path, name, "shape");
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_tensor(path, name, fmt::format("shape dimension {} is too large", size));
    }
    entry.shape.push_back(static_cast<int64_t>(size));
    overflow = overflow || __builtin_mul_overflow(numel, size, &numel);
  }
  const uint64_t item_size = c10::elementSize(entry.dtype);
  uint64_t expected_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, item_size, &expected_bytes);
  // A zero dimension makes the tensor empty whatever the other dimensions multiplied to.
  if (std::find(entry.shape.begin(), entry.shape.end(), 0) != entry.shape.end()) {
    overflow = false;
    expected_bytes = 0;
  }
  if (overflow) fail_tensor(path, name, fmt::format("shape {} is too large", shape.dump()));

  const Json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    fail_tensor(path, name, fmt::format("data_offsets must be [begin, end], found {}", offsets.dump()));
  }
  entry.data_begin = read_unsigned(offsets[0], path, name, "data_offsets");
  entry.data_end = read_unsigned(offsets[1], path, name, "data_offsets");
  if (entry.data_begin > entry.data_end) {
    fail_tensor(path, name, fmt::format("data_offsets [{}, {}] end before they begin", entry.data_begin,
                                        entry.data_end));
  }
  if (entry.data_end > data_size) {
    fail_tensor(path, name, fmt::format("data_offsets [{}, {}] reach past the data section, which holds {} bytes "
                                        "(truncated file?)", entry.data_begin, entry.data_end, data_size));
  }
  if (entry.data_end - entry.data_begin != expected_bytes) {
    fail_tensor(path, name, fmt::format("data_offsets [{}, {}] span {} bytes, but dtype {} and shape {} need {} bytes",
                                        entry.data_begin, entry.data_end, entry.data_end - entry.data_begin,
                                        dtype.get<std::string>(), shape.dump(), expected_bytes));
  }
  return entry;
}

// Overlapping ranges would make two tensors alias the same bytes: a sign of a corrupt or malicious header.
void check_no_overlap(const std::map<std::string, TensorEntry>& entries, const std::filesystem::path& path) {
  std::vector<std::pair<const std::string*, const TensorEntry*>> by_begin;
  for (const auto& [name, entry] : entries) {
    if (entry.data_end > entry.data_begin) by_begin.emplace_back(&name, &entry);  // empty tensors take no bytes
  }
  std::sort(by_begin.begin(), by_begin.end(),
            [](const auto& a, const auto& b) { return a.second->data_begin < b.second->data_begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const auto& [previous_name, previous] = by_begin[i - 1];
    const auto& [name, entry] = by_begin[i];
    if (entry->data_begin < previous->data_end) {
      fail(path, fmt::format("tensors '{}' (bytes [{}, {})) and '{}' (bytes [{}, {})) overlap", *previous_name,
                             previous->data_begin, previous->data_end, *name, entry->data_begin, entry->data_end));
    }
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  std::error_code error;
  const uint64_t file_size = std::filesystem::file_size(path, error);
  if (error) fail(path, fmt::format("cannot read the file ({})", error.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the file");
  if (file_size < 8) {
    fail(path, fmt::format("the file is {} bytes, too short for the 8-byte header size", file_size));
  }
  const uint64_t header_size = read_header_size(in, path);
  if (header_size > kMaxHeaderBytes) {
    fail(path, fmt::format("the header size field says {} bytes, more than the {} bytes allowed (corrupt file?)",
                           header_size, kMaxHeaderBytes));
  }
  if (header_size > file_size - 8) {
    fail(path, fmt::format("the header size field says {} bytes, but only {} bytes follow it (truncated file?)",
                           header_size, file_size - 8));
  }
  std::string text(header_size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(header_size))) fail(path, "cannot read the header");

  SafetensorsFile file;
  file.path_ = path;
  file.data_offset_ = 8 + header_size;
  const uint64_t data_size = file_size - file.data_offset_;
  const Json header = parse_header(text, path);  // a named local: items() must not outlive the JSON it iterates
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      file.metadata_ = parse_metadata(info, path);
    } else {
      file.entries_.emplace(name, parse_entry(name, info, data_size, path));
    }
  }
  check_no_overlap(file.entries_, path);
  return file;
}

// The data is copied byte for byte into the tensor: this assumes a little-endian host, as safetensors stores
// little-endian data (every platform LibTorch builds for here, x86-64 and aarch64, is little-endian).
torch::Tensor SafetensorsFile::load(const std::string& name) const {
  auto found = entries_.find(name);
  if (found == entries_.end()) fail_tensor(path_, name, "not in this file");
  const TensorEntry& entry = found->second;
  torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype));
  const uint64_t bytes = entry.data_end - entry.data_begin;
  if (bytes == 0) return tensor;

  std::ifstream in(path_, std::ios::binary);
  if (!in) fail_tensor(path_, name, "cannot open the file to read the tensor");
  in.seekg(static_cast<std::streamoff>(data_offset_ + entry.data_begin));
  in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(bytes));
  if (!in || static_cast<uint64_t>(in.gcount()) != bytes) {
    // The header was checked on open, so this means the file shrank since.
    fail_tensor(path_, name, fmt::format("read {} of {} bytes (was the file truncated after it was opened?)",
                                         in.gcount(), bytes));
  }
  if (entry.dtype == torch::kBool) {
    // Any byte but 0 or 1 in a bool tensor is undefined behaviour in LibTorch kernels.
    const auto* data = static_cast<const uint8_t*>(tensor.data_ptr());
    if (std::any_of(data, data + bytes, [](uint8_t byte) { return byte > 1; })) {
      fail_tensor(path_, name, "BOOL data holds bytes other than 0 and 1");
    }
  }
  return tensor;
}

}  // namespace tune::io
