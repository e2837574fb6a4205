// Reads the file written by scripts/make_io_fixtures.py (an independent Python writer) and compares every tensor
// with the formula the script used.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "io_test_helpers.h"
#include "tune/io/safetensors.h"

using tune::io::SafetensorsFile;
using tune::io::testing::fixture_dir;

TEST_CASE("reads the Python-written fixture with exact values per dtype", "[io][safetensors]") {
  const SafetensorsFile file = SafetensorsFile::open(fixture_dir() / "mixed.safetensors");
  CHECK(file.entries().size() == 5);
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}});

  const torch::Tensor f32 = file.load("f32");
  CHECK(f32.scalar_type() == torch::kFloat32);
  CHECK(torch::equal(f32, torch::arange(12, torch::kFloat32).reshape({3, 4}) * 0.5 - 1));

  const torch::Tensor f16 = file.load("f16");
  CHECK(f16.scalar_type() == torch::kFloat16);
  CHECK(torch::equal(f16, (torch::arange(6, torch::kFloat32) * 0.25).to(torch::kFloat16).reshape({2, 3})));

  const torch::Tensor bf16 = file.load("bf16");
  CHECK(bf16.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(bf16, ((torch::arange(8, torch::kFloat32) - 4) * 0.125).to(torch::kBFloat16)));

  const torch::Tensor i64 = file.load("i64");
  CHECK(i64.scalar_type() == torch::kInt64);
  CHECK(torch::equal(i64, torch::arange(5, torch::kInt64) * (int64_t{1} << 40) - 3));

  const torch::Tensor scalar = file.load("scalar");
  CHECK(scalar.dim() == 0);
  CHECK(scalar.item<float>() == 3.25f);
}

TEST_CASE("header entries describe dtype, shape and offsets", "[io][safetensors]") {
  const SafetensorsFile file = SafetensorsFile::open(fixture_dir() / "mixed.safetensors");
  const tune::io::TensorEntry& entry = file.entries().at("f16");
  CHECK(entry.dtype == torch::kFloat16);
  CHECK(entry.shape == std::vector<int64_t>{2, 3});
  CHECK(entry.data_begin == 48);
  CHECK(entry.data_end == 60);
  CHECK(file.contains("i64"));
  CHECK_FALSE(file.contains("missing"));
}

TEST_CASE("loading an absent tensor names the file and the tensor", "[io][safetensors]") {
  const SafetensorsFile file = SafetensorsFile::open(fixture_dir() / "mixed.safetensors");
  const std::string message = tune::io::testing::input_error_message([&] { file.load("nope"); });
  CHECK_THAT(message, Catch::Contains("mixed.safetensors") && Catch::Contains("'nope'"));
}
