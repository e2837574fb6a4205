// Weight directories (single and sharded, from the Python fixture) and load_into_module: success, dtype
// conversion, and each way a checkpoint can disagree with the model (corrupted, non-finite values included).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "io_test_helpers.h"
#include "tune/core/memory_tracker.h"
#include "tune/io/weights.h"

using Catch::Contains;
using tune::io::LoadOptions;
using tune::io::load_into_module;
using tune::io::WeightSource;
using tune::io::testing::fixture_dir;
using tune::io::testing::input_error_message;
using tune::io::testing::ScratchDir;

namespace {

const char* kShard1 = "model-00001-of-00002.safetensors";
const char* kShard2 = "model-00002-of-00002.safetensors";

// The values scripts/make_io_fixtures.py wrote for Sequential(Linear(3, 4), Linear(4, 2)), as F32.
std::map<std::string, torch::Tensor> expected_sequential() {
  return {
      {"0.weight", torch::arange(12, torch::kFloat32).reshape({4, 3}) / 8},
      {"0.bias", torch::arange(4, torch::kFloat32) / 8 - 1},
      {"1.weight", torch::arange(8, torch::kFloat32).reshape({2, 4}) / 8 - 0.5},
      {"1.bias", torch::arange(2, torch::kFloat32) / 8 + 2},
  };
}

torch::nn::Sequential make_sequential(int64_t hidden = 4) {
  return torch::nn::Sequential(torch::nn::Linear(3, hidden), torch::nn::Linear(hidden, 2));
}

std::filesystem::path copy_sharded(const ScratchDir& dir) {
  const auto target = dir / "model";
  std::filesystem::copy(fixture_dir() / "sharded", target);
  return target;
}

// A module with a parameter and an integer buffer, as models keep position ids or step counts.
struct WithBuffer : torch::nn::Module {
  WithBuffer() {
    scale = register_parameter("scale", torch::zeros({3}));
    positions = register_buffer("positions", torch::zeros({4}, torch::kInt64));
  }
  torch::Tensor scale, positions;
};

}  // namespace

TEST_CASE("sharded directory exposes every tensor of every shard", "[io][weights]") {
  const WeightSource source = WeightSource::open_directory(fixture_dir() / "sharded");
  CHECK(source.names() == std::vector<std::string>{"0.bias", "0.weight", "1.bias", "1.weight"});
  CHECK(source.file_of("0.weight").path().filename() == kShard1);
  CHECK(source.file_of("1.bias").path().filename() == kShard2);
  CHECK(source.load("1.weight").scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(source.load("0.weight"), expected_sequential()["0.weight"]));
  CHECK_FALSE(source.contains("2.weight"));
  CHECK_THAT(input_error_message([&] { source.load("2.weight"); }), Contains("sharded") && Contains("'2.weight'"));
}

TEST_CASE("single-file directory and open_file", "[io][weights]") {
  ScratchDir dir;
  tune::io::save_safetensors(dir / "model.safetensors", {{"w", torch::ones({2})}});
  const WeightSource from_dir = WeightSource::open_directory(dir.path());
  CHECK(from_dir.names() == std::vector<std::string>{"w"});
  const WeightSource from_file = WeightSource::open_file(fixture_dir() / "mixed.safetensors");
  CHECK(from_file.contains("bf16"));
  CHECK(from_file.names().size() == 5);
}

TEST_CASE("directory with neither weight file names both", "[io][weights][errors]") {
  ScratchDir dir;
  const std::string message = input_error_message([&] { WeightSource::open_directory(dir.path()); });
  CHECK_THAT(message, Contains(dir.path().string()) && Contains("model.safetensors") &&
                          Contains("model.safetensors.index.json"));
}

TEST_CASE("index listing a missing shard names the index and the shard", "[io][weights][errors]") {
  ScratchDir dir;
  const auto model = copy_sharded(dir);
  std::filesystem::remove(model / kShard2);
  const std::string message = input_error_message([&] { WeightSource::open_directory(model); });
  CHECK_THAT(message, Contains("model.safetensors.index.json") && Contains(kShard2) && Contains("does not exist"));
}

TEST_CASE("index listing a tensor its shard lacks names index, shard and tensor", "[io][weights][errors]") {
  ScratchDir dir;
  const auto model = copy_sharded(dir);
  std::ofstream(model / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"0.weight": ")" << kShard1 << R"(", "extra": ")" << kShard1 << R"("}})";
  const std::string message = input_error_message([&] { WeightSource::open_directory(model); });
  CHECK_THAT(message, Contains("model.safetensors.index.json") && Contains(kShard1) && Contains("'extra'"));
}

TEST_CASE("malformed index is refused", "[io][weights][errors]") {
  ScratchDir dir;
  const auto model = copy_sharded(dir);
  SECTION("not JSON") { std::ofstream(model / "model.safetensors.index.json") << "{oops"; }
  SECTION("no weight_map") { std::ofstream(model / "model.safetensors.index.json") << R"({"metadata": {}})"; }
  // Found by fuzzing: a number beyond double's range is nlohmann's out_of_range, which escaped unnamed.
  SECTION("a number too large for a double") {
    std::ofstream(model / "model.safetensors.index.json") << R"({"metadata": {"total_size": 1e999}, "weight_map": {}})";
  }
  SECTION("shard outside the directory") {
    std::ofstream(model / "model.safetensors.index.json") << R"({"weight_map": {"w": "../x.safetensors"}})";
  }
  CHECK_THAT(input_error_message([&] { WeightSource::open_directory(model); }),
             Contains("model.safetensors.index.json"));
}

TEST_CASE("load_into_module fills a Sequential, converting BF16 to F32", "[io][weights][load]") {
  auto model = make_sequential();
  const WeightSource source = WeightSource::open_directory(fixture_dir() / "sharded");
  CHECK(load_into_module(*model, source) == 4);
  const auto parameters = model->named_parameters();
  for (const auto& [name, expected] : expected_sequential()) {
    INFO(name);
    CHECK(parameters[name].scalar_type() == torch::kFloat32);
    CHECK(torch::equal(parameters[name], expected));
    CHECK(parameters[name].requires_grad());
  }
}

TEST_CASE("load_into_module converts into a BF16 model too", "[io][weights][load]") {
  auto model = make_sequential();
  model->to(torch::kBFloat16);
  load_into_module(*model, WeightSource::open_directory(fixture_dir() / "sharded"));
  const auto parameters = model->named_parameters();
  CHECK(parameters["0.weight"].scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(parameters["0.weight"], expected_sequential()["0.weight"].to(torch::kBFloat16)));
}

TEST_CASE("missing tensors are all reported and nothing is copied", "[io][weights][load]") {
  auto model = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::Linear(4, 2), torch::nn::Linear(2, 2));
  const torch::Tensor before = model->named_parameters()["0.weight"].clone();
  const WeightSource source = WeightSource::open_directory(fixture_dir() / "sharded");
  const std::string message = input_error_message([&] { load_into_module(*model, source); });
  CHECK_THAT(message, Contains("sharded") && Contains("2 tensor(s)") && Contains("'2.weight'") &&
                          Contains("'2.bias'"));
  CHECK(torch::equal(model->named_parameters()["0.weight"], before));

  LoadOptions options;
  options.ignore_missing_containing = {"2."};
  CHECK(load_into_module(*model, source, options) == 4);
}

TEST_CASE("a shape mismatch names the file, the tensor and both shapes", "[io][weights][load]") {
  auto model = make_sequential(/*hidden=*/5);
  const std::string message = input_error_message(
      [&] { load_into_module(*model, WeightSource::open_directory(fixture_dir() / "sharded")); });
  CHECK_THAT(message, Contains(kShard1) &&
                          Contains("tensor '0.weight' has shape [4, 3], the model expects [5, 3]") &&
                          Contains("tensor '1.weight' has shape [2, 4], the model expects [2, 5]"));
}

TEST_CASE("unexpected tensors are an error unless allowed or ignored", "[io][weights][load]") {
  auto model = torch::nn::Sequential(torch::nn::Linear(3, 4));
  const WeightSource source = WeightSource::open_directory(fixture_dir() / "sharded");
  const std::string message = input_error_message([&] { load_into_module(*model, source); });
  CHECK_THAT(message, Contains("sharded") && Contains("'1.weight'") && Contains("'1.bias'"));

  LoadOptions allow;
  allow.allow_unexpected = true;
  CHECK(load_into_module(*model, source, allow) == 2);

  LoadOptions ignore;
  ignore.ignore_unexpected_containing = {"1."};
  CHECK(load_into_module(*model, source, ignore) == 2);
  CHECK(torch::equal(model->named_parameters()["0.bias"], expected_sequential()["0.bias"]));
}

TEST_CASE("the prefix option maps module names to file names", "[io][weights][load]") {
  ScratchDir dir;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, value] : expected_sequential()) tensors.emplace_back("base_model.model." + name, value);
  tune::io::save_safetensors(dir / "adapter.safetensors", tensors);
  const WeightSource source = WeightSource::open_file(dir / "adapter.safetensors");

  auto model = make_sequential();
  const std::string message = input_error_message([&] { load_into_module(*model, source); });
  CHECK_THAT(message, Contains("4 tensor(s)") && Contains("base_model.model.0.bias"));  // the hint shows file names

  LoadOptions options;
  options.prefix = "base_model.model.";
  CHECK(load_into_module(*model, source, options) == 4);
  CHECK(torch::equal(model->named_parameters()["1.weight"], expected_sequential()["1.weight"]));
}

TEST_CASE("buffers are loaded, and integer dtypes must match", "[io][weights][load]") {
  ScratchDir dir;
  WithBuffer module;
  const torch::Tensor positions = torch::arange(4, torch::kInt64) + 7;
  tune::io::save_safetensors(dir / "ok.safetensors", {{"scale", torch::ones({3})}, {"positions", positions}});
  CHECK(load_into_module(module, WeightSource::open_file(dir / "ok.safetensors")) == 2);
  CHECK(torch::equal(module.positions, positions));

  tune::io::save_safetensors(dir / "bad.safetensors",
                             {{"scale", torch::ones({3}, torch::kInt32)}, {"positions", positions.to(torch::kFloat32)}});
  const std::string message =
      input_error_message([&] { load_into_module(module, WeightSource::open_file(dir / "bad.safetensors")); });
  CHECK_THAT(message, Contains("bad.safetensors") && Contains("tensor 'scale' has dtype I32, the model expects F32") &&
                          Contains("tensor 'positions' has dtype F32, the model expects I64"));
}

TEST_CASE("a Linear without bias needs no bias tensor", "[io][weights][load]") {
  ScratchDir dir;
  torch::nn::Linear linear(torch::nn::LinearOptions(3, 2).bias(false));
  tune::io::save_safetensors(dir / "w.safetensors", {{"weight", torch::ones({2, 3})}});
  CHECK(load_into_module(*linear, WeightSource::open_file(dir / "w.safetensors")) == 1);
  CHECK(torch::equal(linear->weight, torch::ones({2, 3})));
}

TEST_CASE("non-finite weights are refused naming the file and the tensor", "[io][weights][load][errors]") {
  ScratchDir dir;
  const auto expected = expected_sequential();
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
      INFO(c10::toString(dtype) << " " << bad);
      std::vector<std::pair<std::string, torch::Tensor>> tensors;
      for (const auto& [name, tensor] : expected) tensors.emplace_back(name, tensor.to(dtype));
      tensors[3].second = tensors[3].second.clone();  // "1.weight" (the map's order): one bad value in the middle
      tensors[3].second.view(-1)[5] = bad;
      const auto file = dir / fmt::format("corrupt-{}.safetensors", c10::toString(dtype));
      tune::io::save_safetensors(file, tensors);
      auto model = make_sequential();
      const std::string message =
          input_error_message([&] { load_into_module(*model, WeightSource::open_file(file)); });
      CHECK_THAT(message, Contains(file.string()) && Contains("'1.weight'") && Contains("1 non-finite value(s)"));
    }
  }
  // Integer tensors have no NaN to look for, and finite floating ones load as before.
  WithBuffer module;
  const auto file = dir / "finite.safetensors";
  tune::io::save_safetensors(file, {{"scale", torch::ones({3})}, {"positions", torch::arange(4, torch::kInt64)}});
  CHECK(load_into_module(module, WeightSource::open_file(file)) == 2);
}

namespace {

// A big parameter in the file's dtype (read in place), one converted from it, and a non-contiguous one.
struct StreamedModule : torch::nn::Module {
  StreamedModule() {
    same_dtype = register_parameter("same_dtype", torch::zeros({1024, 1024}, torch::kBFloat16));
    converted = register_parameter("converted", torch::zeros({256, 256}, torch::kFloat32));
    transposed = register_parameter("transposed", torch::zeros({8, 4}, torch::kBFloat16).t());
  }
  torch::Tensor same_dtype, converted, transposed;
};

}  // namespace

TEST_CASE("load_into_module reads a tensor of the parameter's dtype straight into it, with no temporary",
          "[io][weights][load][memory]") {
  tune::memory_tracker::install();
  ScratchDir dir;
  const auto file = dir / "streamed.safetensors";
  const torch::Tensor same = torch::randn({1024, 1024}).to(torch::kBFloat16);
  const torch::Tensor converted = torch::randn({256, 256}).to(torch::kBFloat16);
  const torch::Tensor transposed = torch::randn({4, 8}).to(torch::kBFloat16);
  tune::io::save_safetensors(file, {{"same_dtype", same}, {"converted", converted}, {"transposed", transposed}});

  StreamedModule module;
  const WeightSource source = WeightSource::open_file(file);
  const int64_t live_before = tune::memory_tracker::cpu_live_bytes();
  tune::memory_tracker::reset_cpu_peak();
  CHECK(load_into_module(module, source) == 3);
  const int64_t extra = tune::memory_tracker::cpu_peak_bytes() - live_before;

  CHECK(torch::equal(module.same_dtype, same));
  CHECK(module.same_dtype.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(module.converted, converted.to(torch::kFloat32)));
  CHECK(torch::equal(module.transposed, transposed));
  CHECK_FALSE(module.transposed.is_contiguous());
  // The 2 MiB bf16 tensor needed no temporary; only the converted one (128 KiB in the file's dtype) and the
  // non-contiguous one went through one, each in turn.
  INFO("extra bytes while loading: " << extra);
  CHECK(extra < 256 * 256 * 2 + 64 * 1024);
}
