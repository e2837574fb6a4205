// Write-then-read round trips for every dtype, empty tensors and scalars, and the writer's atomic rename.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "io_test_helpers.h"
#include "tune/io/safetensors.h"

using tune::io::SafetensorsFile;
using tune::io::save_safetensors;
using tune::io::testing::ScratchDir;

namespace {

torch::Tensor sample(torch::ScalarType dtype) {
  if (dtype == torch::kBool) return torch::arange(6).remainder(2).eq(0).reshape({2, 3});
  if (dtype == torch::kUInt8) return torch::arange(250, 256).to(dtype).reshape({2, 3});  // high bit set
  if (c10::isFloatingType(dtype)) return ((torch::arange(6, torch::kFloat32) - 3) / 4).to(dtype).reshape({2, 3});
  return (torch::arange(6) - 3).to(dtype).reshape({2, 3});
}

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("round trip keeps values, dtype and shape for every dtype", "[io][safetensors]") {
  const std::vector<torch::ScalarType> dtypes = {torch::kFloat64, torch::kFloat32, torch::kFloat16,
                                                 torch::kBFloat16, torch::kInt64, torch::kInt32,
                                                 torch::kInt16, torch::kInt8, torch::kUInt8, torch::kBool};
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (torch::ScalarType dtype : dtypes) {
    const std::string name = c10::toString(dtype);
    tensors.emplace_back(name, sample(dtype));
    tensors.emplace_back(name + ".empty", torch::empty({0, 3}, torch::TensorOptions().dtype(dtype)));
    tensors.emplace_back(name + ".scalar", sample(dtype).flatten()[1].clone());
  }
  ScratchDir dir;
  save_safetensors(dir / "all.safetensors", tensors, {{"format", "pt"}, {"note", "round trip"}});

  const SafetensorsFile file = SafetensorsFile::open(dir / "all.safetensors");
  CHECK(file.entries().size() == tensors.size());
  CHECK(file.metadata().at("note") == "round trip");
  for (const auto& [name, expected] : tensors) {
    INFO(name);
    const torch::Tensor loaded = file.load(name);
    CHECK(loaded.scalar_type() == expected.scalar_type());
    CHECK(loaded.sizes() == expected.sizes());
    CHECK(torch::equal(loaded, expected));
  }
}

TEST_CASE("writer keeps the given order, aligns the data and copies non-contiguous tensors", "[io][safetensors]") {
  ScratchDir dir;
  const torch::Tensor transposed = torch::arange(6, torch::kFloat32).reshape({2, 3}).t();
  REQUIRE_FALSE(transposed.is_contiguous());
  save_safetensors(dir / "order.safetensors", {{"zeta", transposed}, {"alpha", torch::ones({1})}});

  const std::string bytes = read_all(dir / "order.safetensors");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(header_size % 8 == 0);
  const std::string header = bytes.substr(8, header_size);
  CHECK(header.find("\"zeta\"") < header.find("\"alpha\""));
  CHECK(header.find("__metadata__") == std::string::npos);  // none given, none written

  CHECK(torch::equal(SafetensorsFile::open(dir / "order.safetensors").load("zeta"), transposed));
}

TEST_CASE("writer goes through a .tmp file and renames it", "[io][safetensors]") {
  ScratchDir dir;
  const std::filesystem::path path = dir / "model.safetensors";
  save_safetensors(path, {{"a", torch::zeros({2})}});
  save_safetensors(path, {{"b", torch::ones({3})}});  // replaces the earlier file
  CHECK(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(dir / "model.safetensors.tmp"));
  const SafetensorsFile file = SafetensorsFile::open(path);
  CHECK_FALSE(file.contains("a"));
  CHECK(torch::equal(file.load("b"), torch::ones({3})));
}

TEST_CASE("writer rejects duplicate names and leaves nothing behind", "[io][safetensors]") {
  ScratchDir dir;
  const std::filesystem::path path = dir / "dup.safetensors";
  try {
    save_safetensors(path, {{"w", torch::zeros({1})}, {"w", torch::ones({1})}});
    FAIL("expected an error for the duplicate name");
  } catch (const tune::Error& error) {
    CHECK_THAT(std::string(error.what()), Catch::Contains("dup.safetensors") && Catch::Contains("'w'"));
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(dir / "dup.safetensors.tmp"));
}

TEST_CASE("writer reports a directory that does not exist", "[io][safetensors]") {
  ScratchDir dir;
  const std::filesystem::path path = dir / "no/such/dir/x.safetensors";
  try {
    save_safetensors(path, {{"w", torch::zeros({1})}});
    FAIL("expected an error");
  } catch (const tune::Error& error) {
    CHECK_THAT(std::string(error.what()), Catch::Contains("x.safetensors.tmp"));
  }
}
