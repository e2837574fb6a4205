// Shared by the io tests: a scratch directory per test, a raw file writer for hand-made corrupt files, and a
// helper that returns an expected InputError's message so each test can check what the message names.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tune/core/error.h"

namespace tune::io::testing {

inline std::filesystem::path fixture_dir() { return std::filesystem::path(TUNE_SOURCE_DIR) / "tests/fixtures/io"; }

// A fresh directory, removed at the end of the test; the pid keeps parallel CTest processes apart.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() / fmt::format("tune_test_io_{}_{}", ::getpid(), counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Writes a safetensors-shaped file by hand: the size field (the header's length unless overridden), the header
// text and `data` bytes. Lets tests build files no correct writer would produce.
inline void write_raw(const std::filesystem::path& path, const std::string& header, const std::string& data,
                      int64_t size_field = -1) {
  const uint64_t size = size_field < 0 ? header.size() : static_cast<uint64_t>(size_field);
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((size >> (8 * i)) & 0xff));
  out << header << data;
}

// Runs `action`, which must throw tune::InputError, and returns the message.
template <typename Action>
std::string input_error_message(Action&& action) {
  try {
    action();
  } catch (const tune::InputError& error) {
    return error.what();
  }
  FAIL("expected tune::InputError, nothing was thrown");
  return {};
}

}  // namespace tune::io::testing
