// The kernel is an elementwise jiterator function over the output viewed as [blocks, blocksize / 2, 2]: the packed
// byte broadcasts over the last dimension, whose index (0, 1) selects its high or low nibble, and the block's
// absmax broadcasts over the block. The code book is compiled in as a tree of selects on the nibble's bits (no
// memory lookup; the kernel is bound by its 2.5 bytes of traffic per weight).
#include "tune/precision/nf4_cuda_kernel.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "tune/core/log.h"

#if defined(TUNE_WITH_CUDA)
#include <ATen/cuda/jiterator.h>
#endif

namespace tune::precision {
namespace {

std::atomic<bool> kernel_failed{false};
std::atomic<bool> kernel_ran{false};

bool enabled_by_environment() {
  const char* value = std::getenv("TUNE_NF4_KERNEL");
  return value != nullptr && std::string(value) == "jit";
}

// The code book as a select tree on the nibble's bits: level 0 picks within pairs by bit 0, and so on. Hexadecimal
// float literals carry the table's float32 values exactly.
std::string code_book_select(const std::array<float, 16>& code) {
  std::vector<std::string> level;
  for (const float value : code) level.push_back(fmt::format("{:a}f", value));
  std::string body;
  for (int bit = 0; level.size() > 1; ++bit) {
    std::vector<std::string> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      const std::string name = fmt::format("s{}_{}", bit, i / 2);
      body += fmt::format("  const float {} = (nibble & {}) ? {} : {};\n", name, 1 << bit, level[i + 1], level[i]);
      next.push_back(name);
    }
    level = std::move(next);
  }
  return body + "  const float code_value = " + level.front() + ";\n";
}

// Inputs: the packed byte, the lane (0: high nibble, 1: low nibble), then the absmax: float32 in one input, or
// bfloat16 in three parts (split_into_bf16_parts) summed as (hi + mid) + lo. The computation is in float32 (the
// jiterator's compute type for bfloat16 too) and the store rounds once. The code book is nf4_code(): check_nf4
// refuses any other.
std::string kernel_source(const std::string& name, bool absmax_in_parts) {
  const std::string absmax_params = absmax_in_parts ? "T hi, T mid, T lo" : "T absmax_in";
  const std::string absmax_value =
      absmax_in_parts ? "(static_cast<float>(hi) + static_cast<float>(mid)) + static_cast<float>(lo)"
                      : "static_cast<float>(absmax_in)";
  return fmt::format(
      "template <typename T> T {}(T packed, T lane, {}) {{\n"
      "  const int shift = 4 - 4 * static_cast<int>(static_cast<float>(lane));\n"
      "  const int nibble = (static_cast<int>(static_cast<float>(packed)) >> shift) & 15;\n"
      "{}"
      "  const float absmax = {};\n"
      "  return static_cast<T>(code_value * absmax);\n"
      "}}\n",
      name, absmax_params, code_book_select(nf4_code()), absmax_value);
}

}  // namespace

std::array<torch::Tensor, 3> split_into_bf16_parts(const torch::Tensor& values) {
  const torch::Tensor x = values.to(torch::kFloat32);
  const torch::Tensor hi = x.to(torch::kBFloat16);
  const torch::Tensor rest = x - hi.to(torch::kFloat32);
  const torch::Tensor mid = rest.to(torch::kBFloat16);
  const torch::Tensor lo = (rest - mid.to(torch::kFloat32)).to(torch::kBFloat16);
  return {hi, mid, lo};
}

bool nf4_cuda_kernel_ran() { return kernel_ran.load(); }

std::optional<torch::Tensor> dequantize_nf4_cuda_kernel(const Nf4Tensor& tensor, const torch::Tensor& block_absmax,
                                                        torch::ScalarType out_dtype) {
  kernel_ran = false;
#if defined(TUNE_WITH_CUDA)
  if (!tensor.packed.is_cuda() || kernel_failed.load() || !enabled_by_environment()) return std::nullopt;
  if (tensor.blocksize % 2 != 0 || tensor.numel() % tensor.blocksize != 0) return std::nullopt;
  const int64_t blocks = tensor.blocks();
  const auto options = tensor.packed.options();
  const torch::Tensor packed = tensor.packed.reshape({blocks, tensor.blocksize / 2, 1});
  // bfloat16 output: every input in bfloat16 (bytes and lanes are exact in it), so bfloat16 is the common dtype and
  // the kernel stores it directly. Other outputs: float32 inputs and output, then a cast (a float32 product rounded
  // once either way).
  const bool bf16_out = out_dtype == torch::kBFloat16;
  const auto input_dtype = bf16_out ? torch::kBFloat16 : torch::kFloat32;
  // Made on the device (no host-to-device copy, which would wait for the stream).
  const torch::Tensor lanes = torch::arange(2, options.dtype(input_dtype)).view({1, 1, 2});
  c10::SmallVector<at::Tensor> inputs{packed, lanes};
  if (bf16_out) {
    for (const torch::Tensor& part : split_into_bf16_parts(block_absmax)) inputs.push_back(part.view({blocks, 1, 1}));
  } else {
    inputs.push_back(block_absmax.to(torch::kFloat32).view({blocks, 1, 1}));
  }
  static const std::string bf16_name = "tune_nf4_dequant_bf16", f32_name = "tune_nf4_dequant_f32";
  static const std::string bf16_source = kernel_source(bf16_name, true), f32_source = kernel_source(f32_name, false);
  try {
    const auto outputs = at::cuda::CompileAndLaunchKernel(bf16_out ? bf16_source : f32_source,
                                                          bf16_out ? bf16_name : f32_name, /*num_outputs=*/1,
                                                          inputs, /*extra_args=*/{}, /*return_by_ref=*/false);
    kernel_ran = true;
    return outputs[0].view(tensor.shape).to(out_dtype);
  } catch (const std::exception& error) {
    kernel_failed = true;
    log::warn("the NF4 CUDA kernel did not run ({}); dequantising with ATen operators from now on",
              std::string(error.what()).substr(0, 300));
    return std::nullopt;
  }
#else
  (void)tensor;
  (void)block_absmax;
  (void)out_dtype;
  return std::nullopt;
#endif
}

}  // namespace tune::precision
