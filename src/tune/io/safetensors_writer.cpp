// Safetensors writer: header in the caller's tensor order, data 8-byte aligned, written to a temporary name and
// renamed so that a reader (or a resumed run) never sees a half-written file.
#include "tune/io/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "tune/core/error.h"
#include "tune/io/dtypes.h"

namespace tune::io {
namespace {

// Closes the file and removes the temporary on any error path, so failed saves leave nothing behind.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::filesystem::path path) : path_(std::move(path)) {
    file_ = std::fopen(path_.c_str(), "wb");
    if (file_ == nullptr) fail("cannot create");
  }
  ~TemporaryFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) {
      std::error_code ignored;
      std::filesystem::remove(path_, ignored);
    }
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  void write(const void* data, size_t bytes) {
    if (bytes != 0 && std::fwrite(data, 1, bytes, file_) != bytes) fail("cannot write");
  }

  // fsync before the rename: otherwise a power loss may leave the new name pointing at unwritten blocks.
  void commit_as(const std::filesystem::path& final_path) {
    if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) fail("cannot flush");
    const int close_result = std::fclose(file_);
    file_ = nullptr;
    if (close_result != 0) fail("cannot close");
    std::error_code error;
    std::filesystem::rename(path_, final_path, error);
    if (error) {
      throw Error(fmt::format("cannot rename {} to {}: {}", path_.string(), final_path.string(), error.message()));
    }
    committed_ = true;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw Error(fmt::format("{} {}: {}", what, path_.string(), std::strerror(errno)));
  }

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the caller's order in the header, as the Python writers do.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::vector<torch::Tensor> cpu_tensors;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") {
      throw Error(fmt::format("{}: '__metadata__' is reserved and cannot name a tensor", path.string()));
    }
    if (!names.insert(name).second) {
      throw Error(fmt::format("{}: tensor '{}' is given twice; tensor names must be unique", path.string(), name));
    }
    if (!tensor.defined()) throw Error(fmt::format("{}: tensor '{}' is undefined", path.string(), name));
    cpu_tensors.push_back(tensor.detach().to(torch::kCPU).contiguous());
    const torch::Tensor& cpu = cpu_tensors.back();
    const uint64_t bytes = cpu.numel() * cpu.element_size();
    header[name] = {{"dtype", safetensors_name_of(cpu.scalar_type())},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }

  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned, as the format recommends
  unsigned char size_field[8];
  for (int i = 0; i < 8; ++i) size_field[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  TemporaryFile out(path.string() + ".tmp");
  out.write(size_field, sizeof size_field);
  out.write(text.data(), text.size());
  // Raw bytes are little-endian only on a little-endian host, which the reader assumes as well.
  for (const torch::Tensor& cpu : cpu_tensors) out.write(cpu.data_ptr(), cpu.numel() * cpu.element_size());
  out.commit_as(path);
}

}  // namespace tune::io
