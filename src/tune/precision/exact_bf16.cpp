// to_bf16_if_exact: one vectorisable loop per chunk of the input (the compiler turns it into shifts and an or-reduce),
// over LibTorch's intra-op threads (tune::parallel_for).
#include "tune/precision/exact_bf16.h"

#include <atomic>
#include <cstring>

#include "tune/core/error.h"
#include "tune/core/parallel.h"

namespace tune::precision {

namespace {

// Upper halves of `count` floats into `out`; returns the or of their lower halves (0: every value fits in bf16).
uint32_t copy_upper_halves(const uint32_t* in, uint16_t* out, int64_t count) {
  uint32_t low_bits = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t word = in[i];
    low_bits |= word & 0xFFFFu;
    out[i] = static_cast<uint16_t>(word >> 16);
  }
  return low_bits;
}

}  // namespace

torch::Tensor to_bf16_if_exact(const torch::Tensor& fp32) {
  if (fp32.scalar_type() != torch::kFloat || !fp32.device().is_cpu() || !fp32.is_contiguous()) {
    throw Error("to_bf16_if_exact: expects a contiguous CPU float32 tensor");
  }
  torch::Tensor out = torch::empty(fp32.sizes(), fp32.options().dtype(torch::kBFloat16));
  static_assert(sizeof(float) == sizeof(uint32_t) && sizeof(c10::BFloat16) == sizeof(uint16_t));
  const auto* in = reinterpret_cast<const uint32_t*>(fp32.data_ptr<float>());
  auto* dst = reinterpret_cast<uint16_t*>(out.data_ptr<c10::BFloat16>());
  std::atomic<uint32_t> low_bits{0};
  // 64k elements a chunk at least: a thread's start costs more than copying fewer.
  parallel_for(0, fp32.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    const uint32_t chunk_bits = copy_upper_halves(in + begin, dst + begin, end - begin);
    if (chunk_bits != 0) low_bits.fetch_or(chunk_bits, std::memory_order_relaxed);
  });
  if (low_bits.load() != 0) return {};
  return out;
}

}  // namespace tune::precision
