// Pillow as the outside truth for the image tests: scripts/image_reference.py run with the project's Python,
// its raw RGB bytes read back as uint8 [H, W, 3].
#pragma once

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "data_test_helpers.h"

namespace tune::data::testing {

inline std::string quoted(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

// Runs image_reference.py with `arguments`; nullopt when Pillow is missing (exit 3: the caller WARNs and skips),
// a failed check otherwise.
inline bool run_image_reference(const std::string& arguments) {
  const std::string command = std::string(TUNE_PYTHON) + " " +
                              quoted(std::filesystem::path(TUNE_SOURCE_DIR) / "scripts" / "image_reference.py") +
                              " " + arguments + " > /dev/null";
  INFO(command);
  const int status = std::system(command.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
    WARN("Pillow is not installed in the project's Python (it comes with diffusers): reference check skipped");
    return false;
  }
  REQUIRE(status == 0);
  return true;
}

// Raw bytes written by image_reference.py as uint8 [height, width, 3].
inline torch::Tensor read_raw_rgb(const std::filesystem::path& path, int64_t height, int64_t width) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(static_cast<int64_t>(bytes.size()) == height * width * 3);
  return torch::from_blob(bytes.data(), {height, width, 3}, torch::kUInt8).clone();
}

// Pillow's decoding of `image`, or nullopt without Pillow.
inline std::optional<torch::Tensor> pillow_decode(const std::filesystem::path& image, int64_t height, int64_t width) {
  const auto raw = scratch_dir() / "pillow.raw";
  if (!run_image_reference("decode " + quoted(image) + " " + quoted(raw))) return std::nullopt;
  return read_raw_rgb(raw, height, width);
}

inline int64_t max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kInt64) - b.to(torch::kInt64)).abs().max().item<int64_t>();
}

}  // namespace tune::data::testing
