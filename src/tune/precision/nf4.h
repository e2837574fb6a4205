// NF4 (4-bit NormalFloat) weights, stored bit for bit as bitsandbytes stores them, so tune reads checkpoints that
// transformers + bitsandbytes wrote and writes ones they read. The reference is bitsandbytes 0.50.2's CPU path
// (quantize_4bit / dequantize_4bit with quant_type="nf4"); tests/precision/test_nf4.cpp checks the bytes against it.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tune::precision {

// The block sizes bitsandbytes accepts for 4-bit quantisation.
inline constexpr std::array<int64_t, 8> kNf4BlockSizes = {32, 64, 128, 256, 512, 1024, 2048, 4096};
// bitsandbytes quantises the absmaxes (double quantisation) in blocks of this size, whatever the weight's block size.
inline constexpr int64_t kNf4NestedBlockSize = 256;

// A weight quantised to NF4, with the fields of bitsandbytes' QuantState (their safetensors names in comments).
// Every tensor is on the CPU and contiguous; check_nf4 states the invariants.
struct Nf4Tensor {
  // `weight`: the 4-bit indices into `code` of the flattened row-major weight, element 2i in the high nibble of byte i
  // and 2i+1 in the low; an odd element count is padded with index 7 (the code for 0). uint8, [(numel + 1) / 2].
  torch::Tensor packed;
  int64_t blocksize = 64;  // consecutive elements sharing one absmax; the last block may be partial
  // `weight.absmax`: per block, float32 max |x| (plain), or uint8 indices into nested_code (double quantisation).
  torch::Tensor absmax;
  torch::Tensor code;  // `weight.quant_map`: the 16 NF4 values, float32, ascending (nf4_code())

  // Double quantisation (bitsandbytes' compress_statistics / bnb_4bit_use_double_quant); undefined tensors without.
  // The block absmax is nested_code[absmax[b]] * nested_absmax[b / nested_blocksize] + offset, in float32.
  torch::Tensor nested_absmax;  // `weight.nested_absmax`: float32, one per nested block
  torch::Tensor nested_code;    // `weight.nested_quant_map`: float32 [256], the dynamic map (dynamic_map_signed())
  int64_t nested_blocksize = kNf4NestedBlockSize;
  float offset = 0.0f;  // `nested_offset`: the mean of the absmaxes, subtracted before they were quantised

  std::vector<int64_t> shape;              // the original weight's shape
  torch::ScalarType dtype = torch::kBFloat16;  // the original weight's dtype (bf16, fp16 or fp32)

  bool double_quantized() const { return nested_absmax.defined(); }
  int64_t numel() const;
  int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
  // Bytes held by the tensors above (packed weight and statistics, both code books included).
  int64_t storage_bytes() const;
};

// Nf4Tensor::storage_bytes of a weight of `numel` elements, without quantising one (the memory planner's count).
int64_t nf4_storage_bytes(int64_t numel, int64_t blocksize = 64, bool double_quant = true);

// bitsandbytes' get_4bit_type("nf4"): quantiles of N(0, 1) scaled to [-1, 1], ascending; index 7 is 0.
const std::array<float, 16>& nf4_code();
// bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): the 256 ascending float32 values
// of its 8-bit dynamic type, rebuilt here the way bitsandbytes builds them (LibTorch's linspace, float32 products).
const torch::Tensor& dynamic_map_signed();

// Quantises a bf16, fp16 or fp32 weight (any shape, any device; read as flattened row-major on the CPU) exactly as
// bitsandbytes.functional.quantize_4bit(weight, blocksize, compress_statistics=double_quant, quant_type="nf4") does
// on the CPU. Throws tune::Error for another dtype, an empty weight, a block size bitsandbytes refuses, or a NaN or
// infinity (naming the block).
Nf4Tensor quantize_nf4(const torch::Tensor& weight, int64_t blocksize = 64, bool double_quant = true);

// The per-block float32 absmaxes, undoing double quantisation as bitsandbytes does. [blocks()].
torch::Tensor nf4_block_absmax(const Nf4Tensor& tensor);

// code[index] * absmax[block] in float32, rounded once to `out_dtype` (bf16, fp16 or fp32), in the original shape:
// the values of bitsandbytes' dequantize_4bit. Throws tune::Error for another dtype or a tensor check_nf4 refuses.
torch::Tensor dequantize_nf4(const Nf4Tensor& tensor, torch::ScalarType out_dtype);
inline torch::Tensor dequantize_nf4(const Nf4Tensor& tensor) { return dequantize_nf4(tensor, tensor.dtype); }

// The same values as dequantize_nf4, computed on the fields' device, whichever it is (a QLoRA base on CUDA
// dequantises there). No checks: the tensor was checked (check_nf4) when it was made or read.
// On CUDA one fused kernel (nf4_cuda_kernel.h) computes them where it applies; otherwise, the operator chain's
// transients besides the result: 2 bytes per element for the byte indices and 4 (float32) for the values.
torch::Tensor dequantize_nf4_on_device(const Nf4Tensor& tensor, torch::ScalarType out_dtype);

// Throws tune::Error naming `what` (e.g. the checkpoint tensor) and the field when the sizes, dtypes or devices of the
// fields disagree with each other or with bitsandbytes' format (wrong code book, block size, nested block count, ...).
void check_nf4(const Nf4Tensor& tensor, const std::string& what);

}  // namespace tune::precision
