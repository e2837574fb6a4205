// Reading the JSON fixtures written by scripts/make_train_fixtures.py.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

namespace tune::test {

inline nlohmann::json load_train_fixture(const std::string& name) {
  std::ifstream in(std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/train/" + name);
  if (!in) throw std::runtime_error("missing fixture " + name + ": run .venv/bin/python scripts/make_train_fixtures.py");
  return nlohmann::json::parse(in);
}

// {"shape": [...], "values": [...]} -> float32 tensor; values are exact doubles of fp32 numbers.
inline torch::Tensor tensor_from_json(const nlohmann::json& entry, torch::ScalarType dtype = torch::kFloat) {
  const auto values = entry.at("values").get<std::vector<double>>();
  const auto shape = entry.at("shape").get<std::vector<int64_t>>();
  return torch::tensor(values, torch::kDouble).to(dtype).reshape(shape);
}

inline double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace tune::test
