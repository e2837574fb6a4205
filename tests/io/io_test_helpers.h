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

#include "common/scratch_dir.h"
#include "tune/core/error.h"

namespace tune::io::testing {

using tune::testing::ScratchDir;

inline std::filesystem::path fixture_dir() { return std::filesystem::path(TUNE_SOURCE_DIR) / "tests/fixtures/io"; }


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
