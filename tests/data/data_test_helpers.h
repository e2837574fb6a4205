// Shared helpers for the data tests: fixture paths, scratch files, and a readable view of token runs.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"

namespace tune::data::testing {

inline std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(TUNE_SOURCE_DIR) / "tests" / "fixtures" / "data" / name;
}

inline const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(fixture("tiny.model"));
  return tokenizer;
}

// A fresh directory under the build tree, unique per process and call; tests run in parallel under CTest.
inline std::filesystem::path scratch_dir() {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::path(TUNE_BINARY_DIR) / "test_data_scratch" /
             (std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::filesystem::path write_file(const std::string& name, const std::string& content) {
  auto path = scratch_dir() / name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// The example as runs of equal mask, each spelled by its pieces ("▁" shown as a space, "<s>", "</s>"), so a
// test can state a template's exact token layout as text.
inline std::vector<std::pair<bool, std::string>> mask_runs(const Tokenizer& tokenizer, const TokenizedExample& example) {
  std::vector<std::pair<bool, std::string>> runs;
  for (size_t i = 0; i < example.input_ids.size(); ++i) {
    const bool trained = example.labels[i] != kIgnoreIndex;
    if (runs.empty() || runs.back().first != trained) runs.emplace_back(trained, "");
    std::string piece = tokenizer.piece(example.input_ids[i]);
    for (size_t at = piece.find("\xE2\x96\x81"); at != std::string::npos; at = piece.find("\xE2\x96\x81")) {
      piece.replace(at, 3, " ");
    }
    runs.back().second += piece;
  }
  return runs;
}

}  // namespace tune::data::testing
