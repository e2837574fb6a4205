// Scalar building blocks for tune's vectorised bf16 CPU kernels (nn/gelu_tanh.cpp, nn/softmax_bf16.cpp): bf16 <->
// fp32 by bits, a polynomial exp, and the target_clones attribute that builds a kernel once per instruction set.
// Everything is inline and branch-free so that GCC's and Clang's auto-vectorisers turn the kernels' loops into
// vector code.
#pragma once

#include <cstdint>
#include <cstring>

// The kernels are built once per instruction set and the widest this CPU has is picked when the library loads
// (AVX-512: 16 floats a vector), as LibTorch's own kernels dispatch by CPU capability.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TUNE_VECTOR_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#endif
#endif
#ifndef TUNE_VECTOR_CLONES
#define TUNE_VECTOR_CLONES
#endif

namespace tune::nn::cpu_vector {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

// Round to nearest even, as c10::BFloat16's conversion does; a NaN stays a (quiet) NaN.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

// exp(z) for z in [-87, 87] (callers clamp), to about 2 fp32 ulps: z = n ln2 + r with |r| <= ln2 / 2 (ln2 split in
// two so that n ln2 is exact), e^r by its degree-7 Taylor polynomial (truncation error below 5e-9 relative), and 2^n
// put into the exponent bits.
inline float exp_clamped(float z) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // exactly representable with few mantissa bits
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (z * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (z - n * kLn2High) - n * kLn2Low;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const uint32_t exponent = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return p * scale;
}

}  // namespace tune::nn::cpu_vector
