// precision/nf4.h against bitsandbytes itself: tests/fixtures/nf4/codec.safetensors (scripts/make_nf4_fixture.py)
// holds bitsandbytes 0.50.2's packed bytes, absmaxes, nested statistics and dequantised values for inputs of odd
// sizes, partial blocks, three dtypes, several block sizes and midpoint ties; every comparison is bit for bit. Then the
// rounding against a float64 nearest-code reference, and the errors.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <limits>
#include <string>

#include "tune/core/error.h"
#include "tune/io/safetensors.h"
#include "tune/precision/nf4.h"
#include "tune/precision/nf4_cuda_kernel.h"

using tune::precision::Nf4Tensor;

namespace {

const tune::io::SafetensorsFile& codec_fixture() {
  static const auto file = tune::io::SafetensorsFile::open(std::filesystem::path(TUNE_SOURCE_DIR) /
                                                           "tests/fixtures/nf4/codec.safetensors");
  return file;
}

struct FixtureCase {
  std::string name;
  int64_t blocksize;
  bool double_quant;
};

std::vector<FixtureCase> fixture_cases() {
  std::vector<FixtureCase> cases;
  for (const auto& item : nlohmann::json::parse(codec_fixture().metadata().at("cases"))) {
    cases.push_back({item.at("name").get<std::string>(), item.at("blocksize").get<int64_t>(),
                     item.at("double_quant").get<bool>()});
  }
  return cases;
}

torch::Tensor load(const FixtureCase& c, const std::string& field) {
  return codec_fixture().load(c.name + "." + field);
}

// Same dtype, shape and bytes (so -0.0 differs from 0.0, and NaN payloads would count).
bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto bytes = [](const torch::Tensor& t) { return t.contiguous().reshape({-1}).view(torch::kUInt8); };
  return torch::equal(bytes(a), bytes(b));
}

// The fixture's bitsandbytes tensors as an Nf4Tensor, so dequantisation is checked apart from quantisation.
Nf4Tensor from_fixture(const FixtureCase& c) {
  Nf4Tensor tensor;
  const torch::Tensor input = load(c, "input");
  tensor.shape = input.sizes().vec();
  tensor.dtype = input.scalar_type();
  tensor.blocksize = c.blocksize;
  tensor.packed = load(c, "packed");
  tensor.absmax = load(c, "absmax");
  const auto& code = tune::precision::nf4_code();
  tensor.code = torch::tensor(std::vector<float>(code.begin(), code.end()));
  if (c.double_quant) {
    tensor.nested_absmax = load(c, "nested_absmax");
    tensor.nested_code = load(c, "nested_quant_map");
    tensor.offset = load(c, "offset").item<float>();
  }
  return tensor;
}

template <typename Action>
std::string error_message(Action&& action) {
  try {
    action();
  } catch (const tune::Error& error) {
    return error.what();
  }
  FAIL("expected tune::Error, nothing was thrown");
  return {};
}

}  // namespace

TEST_CASE("nf4: quantize_nf4 gives bitsandbytes' bytes and statistics bit for bit", "[nf4]") {
  const auto cases = fixture_cases();
  REQUIRE(cases.size() >= 10);
  for (const auto& c : cases) {
    INFO("case " << c.name);
    const Nf4Tensor ours = tune::precision::quantize_nf4(load(c, "input"), c.blocksize, c.double_quant);
    CHECK(bitwise_equal(ours.packed, load(c, "packed")));
    CHECK(bitwise_equal(ours.absmax, load(c, "absmax")));
    CHECK(ours.double_quantized() == c.double_quant);
    if (c.double_quant) {
      CHECK(bitwise_equal(ours.nested_absmax, load(c, "nested_absmax")));
      CHECK(bitwise_equal(ours.nested_code, load(c, "nested_quant_map")));
      CHECK(bitwise_equal(torch::tensor({ours.offset}), load(c, "offset")));
      CHECK(ours.nested_blocksize == 256);
    }
    CHECK(ours.shape == load(c, "input").sizes().vec());
    CHECK(ours.dtype == load(c, "input").scalar_type());
  }
}

TEST_CASE("nf4: dequantize_nf4 gives bitsandbytes' values bit for bit, in the input dtype and in float32", "[nf4]") {
  for (const auto& c : fixture_cases()) {
    INFO("case " << c.name);
    const auto dtype = load(c, "input").scalar_type();
    const torch::Tensor expected = load(c, "dequantized");
    const torch::Tensor expected32 = dtype == torch::kFloat32 ? expected : load(c, "dequantized_f32");
    const Nf4Tensor theirs = from_fixture(c);
    CHECK(bitwise_equal(tune::precision::dequantize_nf4(theirs), expected));
    CHECK(bitwise_equal(tune::precision::dequantize_nf4(theirs, torch::kFloat32), expected32));
    // and from our own quantisation, which must be the same tensor
    const Nf4Tensor ours = tune::precision::quantize_nf4(load(c, "input"), c.blocksize, c.double_quant);
    CHECK(bitwise_equal(tune::precision::dequantize_nf4(ours, dtype), expected));
  }
}

TEST_CASE("nf4: the fixture reaches the edge cases it is meant to cover", "[nf4]") {
  // ties: values exactly on a midpoint take the lower code (torch.bucketize, right=False)
  const FixtureCase ties{"ties_f32_64", 64, false};
  const auto packed = load(ties, "packed");
  const auto index = [&](int64_t i) {
    const int byte = packed[i / 2].item<int>();
    return i % 2 == 0 ? byte >> 4 : byte & 0x0F;
  };
  for (int64_t j = 0; j < 15; ++j) {
    INFO("midpoint " << j);
    CHECK(index(2 + j) == j);            // on the midpoint: the lower code
    CHECK(index(2 + 15 + j) == j + 1);   // one float32 step above: the upper code
    CHECK(index(2 + 30 + j) == j);       // one step below: the lower code
  }
  // the all-zero full block keeps absmax 0; an odd count pads its last low nibble with code 7 (0.0)
  CHECK(load(ties, "absmax")[2].item<float>() == 0.0f);
  const FixtureCase odd{"odd_bf16_64_dq", 64, true};
  CHECK(load(odd, "input").numel() % 2 == 1);
  CHECK((load(odd, "packed")[-1].item<int>() & 0x0F) == 7);
  // more than one nested block of 256
  CHECK(load({"bf16_32_dq_650_blocks", 32, true}, "nested_absmax").numel() == 3);
}

TEST_CASE("nf4: every element takes the nearest code to within float32 rounding (float64 reference)", "[nf4]") {
  torch::manual_seed(7);
  const torch::Tensor weight = torch::randn({97, 131}) * torch::logspace(-4, 2, 97).unsqueeze(1);
  const Nf4Tensor plain = tune::precision::quantize_nf4(weight, 64, false);
  const auto n = weight.numel();
  const torch::Tensor flat = weight.reshape({-1}).to(torch::kFloat64);
  const torch::Tensor absmax = plain.absmax.to(torch::kFloat64).repeat_interleave(64).slice(0, 0, n);
  const torch::Tensor scaled = flat / absmax;
  const torch::Tensor code = plain.code.to(torch::kFloat64);
  const torch::Tensor distances = (scaled.unsqueeze(1) - code.unsqueeze(0)).abs();  // [n, 16]
  const torch::Tensor nearest = std::get<0>(distances.min(1));
  const torch::Tensor bytes = plain.packed.to(torch::kInt64);
  const torch::Tensor indices =
      torch::stack({torch::bitwise_right_shift(bytes, 4), bytes & 15}, 1).reshape({-1}).slice(0, 0, n);
  const torch::Tensor chosen = distances.gather(1, indices.unsqueeze(1)).squeeze(1);
  // float32 scaling may move a value across a midpoint by one rounding: a few 1e-7 of the block's absmax at most
  CHECK((chosen - nearest).max().item<double>() <= 1e-6);

  const torch::Tensor values =
      tune::precision::dequantize_nf4(plain, torch::kFloat32).reshape({-1}).to(torch::kFloat64);
  // the widest gap of the code book (-1 to -0.696), halved
  const double largest_half_gap = 0.5 * (code.slice(0, 1) - code.slice(0, 0, -1)).max().item<double>();
  CHECK(((values - flat).abs() <= absmax * largest_half_gap * (1 + 1e-6)).all().item<bool>());

  // Double quantisation moves each absmax by at most half a step of the 8-bit map (its widest step below 1 is
  // 1/64 of the 256-block's scale) plus one of the 65536 lookup bins.
  const Nf4Tensor nested = tune::precision::quantize_nf4(weight, 64, true);
  CHECK(torch::equal(nested.packed, plain.packed));
  const torch::Tensor recovered = tune::precision::nf4_block_absmax(nested).to(torch::kFloat64);
  const torch::Tensor scale =
      nested.nested_absmax.to(torch::kFloat64).repeat_interleave(256).slice(0, 0, plain.blocks());
  const torch::Tensor error = (recovered - plain.absmax.to(torch::kFloat64)).abs();
  CHECK((error <= scale * (0.5 * 0.9 / 64 + 2.0 / 65535) + 1e-6).all().item<bool>());
}

TEST_CASE("nf4: layout, sizes and the code books", "[nf4]") {
  const auto& code = tune::precision::nf4_code();
  CHECK(code[0] == -1.0f);
  CHECK(code[7] == 0.0f);
  CHECK(code[15] == 1.0f);
  const torch::Tensor map = tune::precision::dynamic_map_signed();
  REQUIRE(map.numel() == 256);
  CHECK(map[0].item<float>() == -map[254].item<float>());  // signed: 127 values a side, 0 and 1.0 at the top
  CHECK(map[255].item<float>() == 1.0f);
  CHECK(torch::equal(map, std::get<0>(map.sort())));

  // element 2i in the high nibble: [code 15, code 0] for [+max, -max]
  const Nf4Tensor two = tune::precision::quantize_nf4(torch::tensor({2.0f, -2.0f}), 64, false);
  CHECK(two.packed.numel() == 1);
  CHECK(two.packed[0].item<int>() == 0xF0);
  CHECK(two.absmax[0].item<float>() == 2.0f);

  // packed nibbles, one uint8 absmax a block, a float32 scale a 256 blocks, and the two code books
  Nf4Tensor sized = tune::precision::quantize_nf4(torch::zeros({64, 1024}, torch::kBFloat16));
  CHECK(sized.blocks() == 1024);
  CHECK(sized.storage_bytes() == 32768 + 1024 + 16 * 4 + 4 * 4 + 256 * 4);
  CHECK(tune::precision::dequantize_nf4(sized).abs().max().item<float>() == 0.0f);
}

TEST_CASE("nf4: the CUDA kernel's absmax parts add up to the float32 absmax exactly", "[nf4]") {
  // The absmaxes of real blocks (magnitudes from 1e-30 to 1e30, every mantissa pattern) and the edge values; the sum
  // is taken as the kernel takes it, in float32, (hi + mid) + lo.
  torch::manual_seed(5);
  const torch::Tensor magnitudes = torch::pow(10.0, torch::rand({20000}, torch::kDouble) * 60 - 30);
  const torch::Tensor signs = torch::where(torch::rand({20000}) < 0.5, -1.0, 1.0).to(torch::kDouble);
  const torch::Tensor edges = torch::tensor({0.0f, 1.0f, -1.0f, 0.5f, 16777215.0f, 1.0f + 1.0f / 8388608.0f,
                                             std::numeric_limits<float>::min(), 3.0e38f, 0.99999994f});
  const torch::Tensor x = torch::cat({(magnitudes * signs).to(torch::kFloat32), edges});
  const auto [hi, mid, lo] = tune::precision::split_into_bf16_parts(x);
  CHECK(hi.scalar_type() == torch::kBFloat16);
  CHECK(lo.scalar_type() == torch::kBFloat16);
  const torch::Tensor sum = (hi.to(torch::kFloat32) + mid.to(torch::kFloat32)) + lo.to(torch::kFloat32);
  CHECK(torch::equal(sum, x));
  // Not merely close: the float64 sum of the parts is the float32 value too (no part was rounded away).
  CHECK(torch::equal((hi.to(torch::kDouble) + mid.to(torch::kDouble) + lo.to(torch::kDouble)), x.to(torch::kDouble)));
  // On the CPU the kernel never runs: the caller falls back to the operator chain.
  const Nf4Tensor weight = tune::precision::quantize_nf4(torch::randn({4, 64}), 64, false);
  CHECK_FALSE(tune::precision::dequantize_nf4_cuda_kernel(weight, weight.absmax, torch::kBFloat16).has_value());
  CHECK_FALSE(tune::precision::nf4_cuda_kernel_ran());
}

TEST_CASE("nf4: errors name what was wrong and what was expected", "[nf4]") {
  using tune::precision::quantize_nf4;
  CHECK_THAT(error_message([] { quantize_nf4(torch::ones({4, 4}, torch::kInt32)); }),
             Catch::Contains("bfloat16, float16 or float32") && Catch::Contains("Int"));
  CHECK_THAT(error_message([] { quantize_nf4(torch::ones({4, 4}, torch::kFloat64)); }), Catch::Contains("Double"));
  CHECK_THAT(error_message([] { quantize_nf4(torch::ones({0, 4})); }), Catch::Contains("empty"));
  CHECK_THAT(error_message([] { quantize_nf4(torch::ones({4, 4}), 48); }), Catch::Contains("blocksize 48"));
  torch::Tensor broken = torch::ones({3, 64});
  broken[2][5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THAT(error_message([&] { quantize_nf4(broken); }),
             Catch::Contains("block 2") && Catch::Contains("elements 128 to 191"));
  broken[2][5] = std::numeric_limits<float>::infinity();
  CHECK_THAT(error_message([&] { quantize_nf4(broken); }), Catch::Contains("block 2"));

  const Nf4Tensor good = quantize_nf4(torch::randn({10, 70}), 64, true);
  CHECK_THAT(error_message([&] { tune::precision::dequantize_nf4(good, torch::kInt8); }),
             Catch::Contains("output dtype") && Catch::Contains("Char"));
  Nf4Tensor short_packed = good;
  short_packed.packed = good.packed.slice(0, 1);
  CHECK_THAT(error_message([&] { tune::precision::check_nf4(short_packed, "W"); }),
             Catch::Contains("W: NF4 field 'weight (packed)'") && Catch::Contains("350 elements") &&
                 Catch::Contains("[349]"));
  Nf4Tensor float_absmax = good;
  float_absmax.absmax = good.absmax.to(torch::kFloat32);
  CHECK_THAT(error_message([&] { tune::precision::dequantize_nf4(float_absmax); }),
             Catch::Contains("'absmax'") && Catch::Contains("Byte tensor of 11 elements"));
  Nf4Tensor nested_count = good;
  nested_count.nested_absmax = torch::ones({2});
  CHECK_THAT(error_message([&] { tune::precision::check_nf4(nested_count, "W"); }), Catch::Contains("'nested_absmax'"));
  Nf4Tensor fp4_code = good;
  fp4_code.code = -good.code;
  CHECK_THAT(error_message([&] { tune::precision::check_nf4(fp4_code, "W"); }),
             Catch::Contains("'quant_map'") && Catch::Contains("NF4 code book"));
  Nf4Tensor bad_block = good;
  bad_block.blocksize = 100;
  CHECK_THAT(error_message([&] { tune::precision::check_nf4(bad_block, "W"); }), Catch::Contains("got 100"));
}

// Not a test: the figure for the integrator's notes (run with: test_precision "[nf4-benchmark]").
TEST_CASE("nf4: time quantise + dequantise of a Llama-3-8B MLP matrix (4096 x 14336, bf16)", "[.][nf4-benchmark]") {
  torch::manual_seed(0);
  const torch::Tensor weight = (torch::randn({4096, 14336}) * 0.02).to(torch::kBFloat16);
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    const Nf4Tensor quantised = tune::precision::quantize_nf4(weight);
    const auto middle = std::chrono::steady_clock::now();
    const torch::Tensor restored = tune::precision::dequantize_nf4(quantised, torch::kBFloat16);
    const auto end = std::chrono::steady_clock::now();
    const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    WARN("threads " << at::get_num_threads() << ": quantize_nf4 " << seconds(start, middle) << " s, dequantize_nf4 "
                    << seconds(middle, end) << " s (" << restored.numel() << " elements)");
  }
}
