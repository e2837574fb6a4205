// Sharded weight directories as transformers writes them (save_pretrained's greedy max_shard_size split and its
// model.safetensors.index.json), read back through io::WeightSource as any HF directory is.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>

#include "io_test_helpers.h"
#include "tune/io/json_file.h"
#include "tune/io/sharded_safetensors.h"
#include "tune/io/weights.h"

using namespace tune::io;
using tune::io::testing::ScratchDir;

namespace {

// Five float32 tensors of 400, 400, 1200, 200 and 200 bytes.
std::map<std::string, torch::Tensor> five_tensors() {
  return {{"a", torch::arange(100, torch::kFloat32)},
          {"b", torch::arange(100, torch::kFloat32) * 2},
          {"c", torch::arange(300, torch::kFloat32).reshape({3, 100})},
          {"d", torch::ones({50}, torch::kFloat32)},
          {"e", torch::full({5, 10}, 7.0f)}};
}

std::vector<TensorToWrite> plan_of(const std::map<std::string, torch::Tensor>& tensors, torch::ScalarType dtype) {
  std::vector<TensorToWrite> plan;
  for (const auto& [name, tensor] : tensors) plan.push_back({name, tensor.sizes().vec(), dtype});
  return plan;
}

}  // namespace

TEST_CASE("weights above the shard size are split greedily with an index", "[io][shards]") {
  ScratchDir dir;
  const auto tensors = five_tensors();
  // Max 800 bytes, greedy in order (as save_pretrained): [a b] = 800, [c] = 1200 (larger than a shard: alone),
  // [d e] = 400.
  const auto files = save_sharded_safetensors(dir.path(), plan_of(tensors, torch::kFloat32),
                                              [&](const std::string& name) { return tensors.at(name); }, 800);
  REQUIRE(files.size() == 4);
  CHECK(files.back().filename() == "model.safetensors.index.json");
  const auto index = read_json_file(dir.path() / "model.safetensors.index.json");
  CHECK(index["metadata"]["total_size"] == 2400);
  const std::map<std::string, std::string> expected = {{"a", "model-00001-of-00003.safetensors"},
                                                       {"b", "model-00001-of-00003.safetensors"},
                                                       {"c", "model-00002-of-00003.safetensors"},
                                                       {"d", "model-00003-of-00003.safetensors"},
                                                       {"e", "model-00003-of-00003.safetensors"}};
  for (const auto& [name, file] : expected) CHECK(index["weight_map"][name] == file);
  const auto source = WeightSource::open_directory(dir.path());
  for (const auto& [name, tensor] : tensors) CHECK(torch::equal(source.load(name), tensor));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "model.safetensors"));
}

TEST_CASE("weights within the shard size are one model.safetensors, in the requested dtype", "[io][shards]") {
  ScratchDir dir;
  const auto tensors = five_tensors();
  const auto files = save_sharded_safetensors(
      dir.path(), plan_of(tensors, torch::kBFloat16),
      [&](const std::string& name) { return tensors.at(name).to(torch::kBFloat16); }, kDefaultMaxShardBytes);
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename() == "model.safetensors");
  const auto file = SafetensorsFile::open(dir.path() / "model.safetensors");
  CHECK(file.entries().at("c").dtype == torch::kBFloat16);
  CHECK(torch::equal(file.load("c"), tensors.at("c").to(torch::kBFloat16)));
  // A loader that returns another dtype than planned is a programming error, reported with the tensor's name.
  CHECK_THROWS_WITH(save_sharded_safetensors(dir.path(), plan_of(tensors, torch::kBFloat16),
                                             [&](const std::string& name) { return tensors.at(name); }),
                    Catch::Contains("'a'"));
}

TEST_CASE("shard sizes parse as transformers' max_shard_size", "[io][shards]") {
  CHECK(parse_byte_size("5GB") == 5'000'000'000ULL);
  CHECK(parse_byte_size("500MB") == 500'000'000ULL);
  CHECK(parse_byte_size("2GiB") == 2ULL * 1024 * 1024 * 1024);
  CHECK(parse_byte_size("10kb") == 10'000ULL);
  CHECK(parse_byte_size("1000") == 1000ULL);
  CHECK_FALSE(parse_byte_size("GB").has_value());
  CHECK_FALSE(parse_byte_size("5 GB").has_value());
  CHECK_FALSE(parse_byte_size("5TB").has_value());
  CHECK_FALSE(parse_byte_size("-1").has_value());
  // Found while writing fuzz/weights_index_fuzzer.cpp: the multiplication wrapped around (999999999999999999GB
  // gave a few GB), so a typo'd size silently sharded differently.
  CHECK(parse_byte_size("18446744073GB") == 18'446'744'073'000'000'000ULL);
  CHECK_FALSE(parse_byte_size("18446744074GB").has_value());
  CHECK_FALSE(parse_byte_size("999999999999999999GiB").has_value());
}
