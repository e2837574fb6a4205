// Reading tests/fixtures/diffusion/diffusion.json, written by scripts/make_diffusion_fixture.py (float64 numpy).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

namespace tune::test::diffusion {

inline const nlohmann::json& fixture() {
  static const nlohmann::json data = [] {
    std::ifstream in(std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/diffusion/diffusion.json");
    if (!in) {
      throw std::runtime_error("missing fixture diffusion.json: run .venv/bin/python scripts/make_diffusion_fixture.py");
    }
    return nlohmann::json::parse(in);
  }();
  return data;
}

// {"shape": [...], "values": [...]} -> float64 tensor (or the dtype asked for).
inline torch::Tensor tensor(const nlohmann::json& entry, torch::ScalarType dtype = torch::kDouble) {
  const auto values = entry.at("values").get<std::vector<double>>();
  const auto shape = entry.at("shape").get<std::vector<int64_t>>();
  return torch::tensor(values, torch::kDouble).reshape(shape).to(dtype);
}

inline torch::Tensor doubles(const nlohmann::json& list) {
  return torch::tensor(list.get<std::vector<double>>(), torch::kDouble);
}

inline torch::Tensor longs(const nlohmann::json& list) {
  return torch::tensor(list.get<std::vector<int64_t>>(), torch::kLong);
}

inline double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// max |a - b| / max(|b|, floor): a relative error that tolerates entries near 0.
inline double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b, double floor = 1e-3) {
  const auto ref = b.to(torch::kDouble);
  return ((a.to(torch::kDouble) - ref).abs() / ref.abs().clamp_min(floor)).max().item<double>();
}

}  // namespace tune::test::diffusion
