// Reference fixtures made at test time by a Python script with the reference implementation (transformers,
// diffusers), run by CTest into the build tree before the tests that read them. Without the Python package the
// script writes SKIPPED (the reason) instead, and the test exits 77: CTest reports it skipped, never passed.
#pragma once

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

namespace tune::test {

inline std::filesystem::path reference_fixture_dir(const std::string& name) {
  return std::filesystem::path(TUNE_BINARY_DIR) / name;
}

// Exits 77 (SKIP_RETURN_CODE) with the script's reason when `dir` holds SKIPPED.
inline void skip_if_fixture_skipped(const std::filesystem::path& dir) {
  const auto marker = dir / "SKIPPED";
  if (!std::filesystem::exists(marker)) return;
  std::ifstream in(marker);
  const std::string reason((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::cout << "SKIP: " << reason << std::flush;
  std::exit(77);
}

// max |a - b| / max |b|, in float64; with `where` (nonzero = counted; its dims are a's leading ones, e.g. a [B, L]
// mask for [B, L, D] hidden states) only over those entries.
inline double relative_max_diff(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& where = {}) {
  auto a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  if (where.defined()) {
    auto keep = where.to(torch::kBool);
    while (keep.dim() < a64.dim()) keep = keep.unsqueeze(-1);
    keep = keep.expand_as(a64);
    a64 = a64.masked_select(keep);
    b64 = b64.masked_select(keep);
  }
  return (a64 - b64).abs().max().item<double>() / b64.abs().max().item<double>();
}

}  // namespace tune::test
