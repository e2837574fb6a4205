// NF4 quantisation and dequantisation, bit-compatible with bitsandbytes 0.50.2 on the CPU. Its CPU path is two
// different codes, and each rule below is the one the reference follows (read from bitsandbytes' sources and checked
// against its output by tests/precision/test_nf4.cpp):
// - the 4-bit step is bitsandbytes' default (pure PyTorch) backend: float32 scaling, clamp to [-1, 1], bucketize
//   against the code book's midpoints;
// - the 8-bit step of double quantisation is its native CPU kernel (quantize_cpu_impl), which does not search for
//   the nearest value: it maps the scaled value to one of 65536 evenly spaced bins and looks the code up in a table.
#include "tune/precision/nf4.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>

#include "tune/core/error.h"
#include "tune/core/parallel.h"
#include "tune/precision/nf4_cuda_kernel.h"

namespace tune::precision {
namespace {

// Blocks per parallel task: a task of 1024 blocks of 64 is 64K elements, large enough to amortise the dispatch.
constexpr int64_t kBlocksPerTask = 1024;

// bitsandbytes clamps the divisor at 1e-38 (a float32 subnormal), so an all-zero block scales to zeros, not NaN.
constexpr float kSmallestDivisor = 1e-38f;

// The 4-bit bounds: bitsandbytes computes (code[i] + code[i + 1]) / 2 in float32.
std::array<float, 15> nf4_midpoints() {
  const auto& code = nf4_code();
  std::array<float, 15> bounds{};
  for (size_t i = 0; i < bounds.size(); ++i) bounds[i] = (code[i] + code[i + 1]) / 2.0f;
  return bounds;
}

// torch.bucketize(right=False): the number of bounds strictly below the value, so a value exactly on a midpoint
// takes the lower code. Branch-free so the compiler can vectorise the loop that calls it.
inline uint8_t nf4_index(float scaled, const std::array<float, 15>& bounds) {
  scaled = std::min(std::max(scaled, -1.0f), 1.0f);
  int index = 0;
  for (float bound : bounds) index += scaled > bound ? 1 : 0;
  return static_cast<uint8_t>(index);
}

// Quantises blocks [begin, end) of `input` (n elements) into `packed` and `absmax`; returns the first block holding a
// NaN or infinity, or -1. Full blocks multiply by the float32 reciprocal of their absmax, the partial last block
// divides by its (clamped) absmax and stores the clamped value: bitsandbytes' two code paths, kept apart because the
// results can differ in the last bit.
template <typename T>
int64_t quantize_blocks(const T* input, int64_t n, int64_t blocksize, int64_t begin, int64_t end, float* absmax,
                        uint8_t* packed) {
  static const std::array<float, 15> bounds = nf4_midpoints();
  const int64_t full_blocks = n / blocksize;
  std::vector<uint8_t> indices(static_cast<size_t>(blocksize));
  for (int64_t block = begin; block < end; ++block) {
    const int64_t start = block * blocksize;
    const int64_t length = std::min(blocksize, n - start);
    const T* values = input + start;
    float largest = 0.0f;
    bool has_nan = false;
    for (int64_t i = 0; i < length; ++i) {
      const float value = static_cast<float>(values[i]);
      largest = std::max(largest, std::fabs(value));
      has_nan |= value != value;
    }
    if (has_nan || !std::isfinite(largest)) return block;
    if (block < full_blocks) {
      absmax[block] = largest;
      const float reciprocal = 1.0f / std::max(largest, kSmallestDivisor);
      for (int64_t i = 0; i < length; ++i) indices[i] = nf4_index(static_cast<float>(values[i]) * reciprocal, bounds);
    } else {
      const float divisor = std::max(largest, kSmallestDivisor);
      absmax[block] = divisor;
      for (int64_t i = 0; i < length; ++i) indices[i] = nf4_index(static_cast<float>(values[i]) / divisor, bounds);
    }
    // Blocks have an even size and start at an even index, so a byte never straddles two blocks; only an odd
    // element count leaves a last high nibble alone, and bitsandbytes pads it with a scaled 0.0, i.e. index 7.
    for (int64_t i = 0; i < length; i += 2) {
      const uint8_t low = i + 1 < length ? indices[i + 1] : uint8_t{7};
      packed[(start + i) / 2] = static_cast<uint8_t>(indices[i] << 4 | low);
    }
  }
  return -1;
}

// The CPU kernel's table from a 65536-bin index to the 8-bit code: bin i stands for -1 + 2i/65535 and takes the code
// whose midpoint interval holds it (a bin on a midpoint takes the lower code), all in float32.
std::vector<uint8_t> build_dynamic_lookup(const float* code) {
  constexpr int kBins = 65536;
  std::array<float, 255> midpoints{};
  for (int i = 0; i < 255; ++i) midpoints[i] = 0.5f * (code[i] + code[i + 1]);
  std::vector<uint8_t> lookup(kBins);
  int index = 0;
  for (int bin = 0; bin < kBins; ++bin) {
    const float value = static_cast<float>(bin) * 2.0f / static_cast<float>(kBins - 1) - 1.0f;
    while (index < 255 && midpoints[index] < value) ++index;
    lookup[bin] = static_cast<uint8_t>(index);
  }
  return lookup;
}

// bitsandbytes.functional.quantize_blockwise with the dynamic map, as its CPU kernel computes it. The bin is
// trunc((v + 1) * 0.5 * 65535 + 0.5) with the last multiply-add fused (the shipped library uses one FMA there,
// which changes the bin of a value within one rounding of a bin edge), so std::fma, not two operations.
void quantize_dynamic_blockwise(const float* input, int64_t n, int64_t blocksize, uint8_t* codes, float* absmax) {
  static const std::vector<uint8_t> lookup = build_dynamic_lookup(dynamic_map_signed().data_ptr<float>());
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t start = block * blocksize;
    const int64_t end = std::min(start + blocksize, n);
    float largest = 0.0f;
    for (int64_t i = start; i < end; ++i) largest = std::max(largest, std::fabs(input[i]));
    absmax[block] = largest;
    if (largest == 0.0f) {
      std::fill(codes + start, codes + end, uint8_t{0});
      continue;
    }
    const float reciprocal = 1.0f / largest;
    for (int64_t i = start; i < end; ++i) {
      const float scaled = std::min(std::max(input[i] * reciprocal, -1.0f), 1.0f);
      const float bin = std::fma((scaled + 1.0f) * 0.5f, 65535.0f, 0.5f);
      codes[i] = lookup[static_cast<uint16_t>(static_cast<int32_t>(bin))];
    }
  }
}

// code[index] * scale in float32, rounded once to Out (LibTorch's bf16/fp16 conversions round to nearest even, as
// bitsandbytes' do).
template <typename Out>
void dequantize_blocks(const uint8_t* packed, const float* absmax, int64_t n, int64_t blocksize, Out* out) {
  const auto& code = nf4_code();
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  tune::parallel_for(0, blocks, kBlocksPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t start = block * blocksize;
      const int64_t length = std::min(blocksize, n - start);
      const float scale = absmax[block];
      const uint8_t* bytes = packed + start / 2;
      Out* destination = out + start;
      for (int64_t i = 0; i + 1 < length; i += 2) {
        const uint8_t byte = bytes[i / 2];
        destination[i] = static_cast<Out>(code[byte >> 4] * scale);
        destination[i + 1] = static_cast<Out>(code[byte & 0x0F] * scale);
      }
      if (length % 2 != 0) destination[length - 1] = static_cast<Out>(code[bytes[length / 2] >> 4] * scale);
    }
  });
}

bool is_weight_dtype(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 || dtype == torch::kFloat16 || dtype == torch::kFloat32;
}

bool is_valid_blocksize(int64_t blocksize) {
  return std::find(kNf4BlockSizes.begin(), kNf4BlockSizes.end(), blocksize) != kNf4BlockSizes.end();
}

// "TENSOR: field 'absmax' must be ..., got ...": which tensor, which field, what was expected and what was found.
[[noreturn]] void fail(const std::string& what, const std::string& field, const std::string& message) {
  throw InputError(fmt::format("{}: NF4 field '{}' {}", what, field, message));
}

std::string describe(const torch::Tensor& tensor) {
  if (!tensor.defined()) return "no tensor";
  return fmt::format("{} [{}] on {}{}", c10::toString(tensor.scalar_type()), fmt::join(tensor.sizes(), ", "),
                     tensor.device().str(), tensor.is_contiguous() ? "" : " (not contiguous)");
}

// A CPU, contiguous tensor of `dtype` with `count` elements (any shape: bitsandbytes stores packed weights [n, 1]).
void check_field(const torch::Tensor& tensor, const std::string& what, const std::string& field,
                 torch::ScalarType dtype, int64_t count) {
  if (!tensor.defined() || tensor.scalar_type() != dtype || tensor.numel() != count || !tensor.device().is_cpu() ||
      !tensor.is_contiguous()) {
    fail(what, field, fmt::format("must be a contiguous CPU {} tensor of {} elements, got {}", c10::toString(dtype),
                                  count, describe(tensor)));
  }
}

}  // namespace

int64_t Nf4Tensor::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

int64_t Nf4Tensor::storage_bytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor* tensor : {&packed, &absmax, &code, &nested_absmax, &nested_code}) {
    if (tensor->defined()) bytes += static_cast<int64_t>(tensor->nbytes());
  }
  return bytes;
}

int64_t nf4_storage_bytes(int64_t numel, int64_t blocksize, bool double_quant) {
  const int64_t blocks = (numel + blocksize - 1) / blocksize;
  int64_t bytes = (numel + 1) / 2 + 16 * 4;  // packed nibbles, the 16-value code book
  if (!double_quant) return bytes + blocks * 4;
  const int64_t nested_blocks = (blocks + kNf4NestedBlockSize - 1) / kNf4NestedBlockSize;
  return bytes + blocks + nested_blocks * 4 + 256 * 4;  // 8-bit absmaxes, their float32 scales, the dynamic map
}

const std::array<float, 16>& nf4_code() {
  // bitsandbytes' table, as float32 (the literals are the float32 values' shortest double spellings).
  static const std::array<float, 16> code = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
      1.0f};
  return code;
}

const torch::Tensor& dynamic_map_signed() {
  // Exponent i = 0..6 gives 2^i values per sign: the float32 midpoints of linspace(0.1, 1, 2^i + 1) times 10^(i-6),
  // each product in float32 (a tensor times a Python number); then 0 and 1 complete the 256 values. The same LibTorch
  // ops bitsandbytes calls, so the float32 roundings are the same.
  static const torch::Tensor map = [] {
    std::vector<float> values;
    for (int64_t exponent = 0; exponent < 7; ++exponent) {
      const torch::Tensor bounds = torch::linspace(0.1, 1.0, (int64_t{1} << exponent) + 1, torch::kFloat32);
      const torch::Tensor means = (bounds.slice(0, 0, -1) + bounds.slice(0, 1)) / 2.0;
      const double scale = std::pow(10.0, static_cast<double>(exponent - 6));
      for (const double sign : {1.0, -1.0}) {
        const torch::Tensor scaled = means * (sign * scale);
        values.insert(values.end(), scaled.data_ptr<float>(), scaled.data_ptr<float>() + scaled.numel());
      }
    }
    values.push_back(0.0f);
    values.push_back(1.0f);
    std::sort(values.begin(), values.end());
    return torch::tensor(values, torch::kFloat32);
  }();
  return map;
}

Nf4Tensor quantize_nf4(const torch::Tensor& weight, int64_t blocksize, bool double_quant) {
  if (!weight.defined() || !is_weight_dtype(weight.scalar_type())) {
    throw Error(fmt::format("quantize_nf4: the weight must be bfloat16, float16 or float32 (bitsandbytes' dtypes), "
                            "got {}", weight.defined() ? c10::toString(weight.scalar_type()) : "no tensor"));
  }
  if (weight.numel() == 0) {
    throw Error(fmt::format("quantize_nf4: the weight is empty (shape [{}])", fmt::join(weight.sizes(), ", ")));
  }
  if (!is_valid_blocksize(blocksize)) {
    throw Error(fmt::format("quantize_nf4: blocksize {} is not one bitsandbytes accepts (32, 64, 128, 256, 512, 1024, "
                            "2048 or 4096)", blocksize));
  }
  const torch::Tensor input = weight.detach().to(torch::kCPU).contiguous();
  const int64_t n = input.numel();

  Nf4Tensor result;
  result.blocksize = blocksize;
  result.shape = input.sizes().vec();
  result.dtype = input.scalar_type();
  result.code = torch::tensor(std::vector<float>(nf4_code().begin(), nf4_code().end()), torch::kFloat32);
  result.packed = torch::empty({(n + 1) / 2}, torch::kUInt8);
  torch::Tensor absmax = torch::empty({result.blocks()}, torch::kFloat32);

  std::atomic<int64_t> bad_block{std::numeric_limits<int64_t>::max()};
  AT_DISPATCH_FLOATING_TYPES_AND2(torch::kBFloat16, torch::kHalf, input.scalar_type(), "quantize_nf4", [&] {
    const auto* values = input.data_ptr<scalar_t>();
    tune::parallel_for(0, result.blocks(), kBlocksPerTask, [&](int64_t begin, int64_t end) {
      const int64_t bad = quantize_blocks(values, n, blocksize, begin, end, absmax.data_ptr<float>(),
                                          result.packed.data_ptr<uint8_t>());
      if (bad >= 0) {
        int64_t seen = bad_block.load();
        while (bad < seen && !bad_block.compare_exchange_weak(seen, bad)) {
        }
      }
    });
  });
  if (bad_block.load() != std::numeric_limits<int64_t>::max()) {
    const int64_t block = bad_block.load();
    throw Error(fmt::format("quantize_nf4: the weight holds NaN or infinity in block {} (elements {} to {} of the "
                            "flattened weight); NF4 needs finite values", block, block * blocksize,
                            std::min(n, (block + 1) * blocksize) - 1));
  }

  if (!double_quant) {
    result.absmax = absmax;
    return result;
  }
  // bitsandbytes: offset = absmax.mean(); quantize_blockwise(absmax - offset, blocksize=256). LibTorch's own mean,
  // as bitsandbytes calls it, so the float32 sum is added in the same order.
  const torch::Tensor offset = absmax.mean();
  const torch::Tensor centred = (absmax - offset).contiguous();
  const int64_t blocks = centred.numel();
  result.offset = offset.item<float>();
  result.nested_blocksize = kNf4NestedBlockSize;
  result.absmax = torch::empty({blocks}, torch::kUInt8);
  result.nested_absmax = torch::empty({(blocks + kNf4NestedBlockSize - 1) / kNf4NestedBlockSize}, torch::kFloat32);
  result.nested_code = dynamic_map_signed().clone();
  quantize_dynamic_blockwise(centred.data_ptr<float>(), blocks, kNf4NestedBlockSize,
                             result.absmax.data_ptr<uint8_t>(), result.nested_absmax.data_ptr<float>());
  return result;
}

torch::Tensor nf4_block_absmax(const Nf4Tensor& tensor) {
  check_nf4(tensor, "nf4_block_absmax");
  if (!tensor.double_quantized()) return tensor.absmax;
  // bitsandbytes: dequantize_blockwise (code[q] * nested_absmax[block], float32), then absmax += offset.
  const int64_t blocks = tensor.blocks();
  torch::Tensor absmax = torch::empty({blocks}, torch::kFloat32);
  const auto* codes = tensor.absmax.data_ptr<uint8_t>();
  const auto* code = tensor.nested_code.data_ptr<float>();
  const auto* nested = tensor.nested_absmax.data_ptr<float>();
  auto* out = absmax.data_ptr<float>();
  for (int64_t block = 0; block < blocks; ++block) {
    out[block] = code[codes[block]] * nested[block / tensor.nested_blocksize] + tensor.offset;
  }
  return absmax;
}

torch::Tensor dequantize_nf4(const Nf4Tensor& tensor, torch::ScalarType out_dtype) {
  if (!is_weight_dtype(out_dtype)) {
    throw Error(fmt::format("dequantize_nf4: the output dtype must be bfloat16, float16 or float32, got {}",
                            c10::toString(out_dtype)));
  }
  const torch::Tensor absmax = nf4_block_absmax(tensor);
  torch::Tensor out = torch::empty(tensor.shape, torch::TensorOptions().dtype(out_dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(torch::kBFloat16, torch::kHalf, out_dtype, "dequantize_nf4", [&] {
    dequantize_blocks(tensor.packed.data_ptr<uint8_t>(), absmax.data_ptr<float>(), tensor.numel(), tensor.blocksize,
                      out.data_ptr<scalar_t>());
  });
  return out;
}

namespace {

// One lookup per byte into a [256, 2] float32 table of (high nibble's value, low nibble's value): a quarter of the
// index memory of looking up each nibble. Made once per device (check_nf4 admits only nf4_code()), so a dequantisation
// launches no kernels to rebuild it.
torch::Tensor byte_value_pairs(const torch::Device& device) {
  static std::mutex mutex;
  static std::map<std::string, torch::Tensor> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  torch::Tensor& table = tables[device.str()];
  if (!table.defined()) {
    const auto& code = nf4_code();
    torch::Tensor host = torch::empty({256, 2}, torch::kFloat32);
    auto values = host.accessor<float, 2>();
    for (int byte = 0; byte < 256; ++byte) {
      values[byte][0] = code[byte >> 4];
      values[byte][1] = code[byte & 15];
    }
    table = host.to(device);
  }
  return table;
}

}  // namespace

torch::Tensor dequantize_nf4_on_device(const Nf4Tensor& tensor, torch::ScalarType out_dtype) {
  const int64_t blocks = tensor.blocks();
  // The block absmaxes as nf4_block_absmax computes them: a float32 product, then the offset added (two roundings).
  torch::Tensor absmax = tensor.absmax;
  if (tensor.double_quantized()) {
    const torch::Tensor nested_scale =
        tensor.nested_absmax.repeat_interleave(tensor.nested_blocksize).slice(0, 0, blocks);
    absmax = tensor.nested_code.index_select(0, tensor.absmax.to(torch::kInt)) * nested_scale + tensor.offset;
  }
  if (auto fused = dequantize_nf4_cuda_kernel(tensor, absmax, out_dtype)) return *fused;
  torch::Tensor values =
      byte_value_pairs(tensor.packed.device()).index_select(0, tensor.packed.reshape(-1).to(torch::kInt)).reshape(-1);
  // The packed bytes end at the weight's last (even-padded) element; the last block may be partial.
  const int64_t padded = blocks * tensor.blocksize;
  if (values.numel() < padded) values = torch::constant_pad_nd(values, {0, padded - values.numel()});
  // The float32 product rounded once, straight into the output dtype (no float32 product tensor).
  torch::Tensor out = torch::empty({blocks, tensor.blocksize}, values.options().dtype(out_dtype));
  torch::mul_out(out, values.view({blocks, tensor.blocksize}), absmax.unsqueeze(1));
  return out.view(-1).slice(0, 0, tensor.numel()).view(tensor.shape);
}

void check_nf4(const Nf4Tensor& tensor, const std::string& what) {
  if (tensor.shape.empty() || std::any_of(tensor.shape.begin(), tensor.shape.end(), [](int64_t d) { return d <= 0; })) {
    fail(what, "shape",
         fmt::format("must be a non-empty shape of positive sizes, got [{}]", fmt::join(tensor.shape, ", ")));
  }
  if (!is_weight_dtype(tensor.dtype)) {
    fail(what, "dtype", fmt::format("must be bfloat16, float16 or float32, got {}", c10::toString(tensor.dtype)));
  }
  if (!is_valid_blocksize(tensor.blocksize)) {
    fail(what, "blocksize", fmt::format("must be one of 32, 64, 128, 256, 512, 1024, 2048, 4096, got {}",
                                        tensor.blocksize));
  }
  check_field(tensor.packed, what, "weight (packed)", torch::kUInt8, (tensor.numel() + 1) / 2);
  check_field(tensor.code, what, "quant_map", torch::kFloat32, 16);
  const auto* code = tensor.code.data_ptr<float>();
  if (!std::equal(nf4_code().begin(), nf4_code().end(), code)) {
    fail(what, "quant_map", fmt::format("must be bitsandbytes' NF4 code book, got [{}] (an FP4 or other 4-bit "
                                        "type is not NF4)", fmt::join(code, code + 16, ", ")));
  }
  if (!tensor.double_quantized()) {
    check_field(tensor.absmax, what, "absmax", torch::kFloat32, tensor.blocks());
    return;
  }
  check_field(tensor.absmax, what, "absmax", torch::kUInt8, tensor.blocks());
  if (tensor.nested_blocksize <= 0) {
    fail(what, "nested_blocksize", fmt::format("must be positive, got {}", tensor.nested_blocksize));
  }
  check_field(tensor.nested_code, what, "nested_quant_map", torch::kFloat32, 256);
  check_field(tensor.nested_absmax, what, "nested_absmax", torch::kFloat32,
              (tensor.blocks() + tensor.nested_blocksize - 1) / tensor.nested_blocksize);
  if (!std::isfinite(tensor.offset)) fail(what, "nested_offset", fmt::format("must be finite, got {}", tensor.offset));
}

}  // namespace tune::precision
