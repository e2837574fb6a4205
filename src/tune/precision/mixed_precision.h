// Mixed precision: autocast scopes on CPU and CUDA (bf16 or fp16 matmuls, fp32 master weights).
#pragma once

#include <torch/types.h>

#include <string>

namespace tune::precision {

enum class MixedPrecision { no, bf16, fp16 };

MixedPrecision parse_mixed_precision(const std::string& name);  // "bf16" | "fp16" | "no"; UsageError otherwise
std::string to_string(MixedPrecision precision);
torch::ScalarType compute_dtype(MixedPrecision precision);       // kBFloat16 / kHalf / kFloat

// The autocast state of the current thread (enabled flags and dtypes for CPU and CUDA), to capture in a
// checkpointed forward and re-enter for its recompute.
struct AutocastState {
  bool cpu_enabled = false;
  torch::ScalarType cpu_dtype = torch::kBFloat16;
  bool cuda_enabled = false;
  torch::ScalarType cuda_dtype = torch::kHalf;
  static AutocastState current();
};

// RAII: enters the given autocast state (or `precision` on `device`) and restores the previous one on exit,
// clearing autocast's cast cache as torch.autocast does.
class AutocastScope {
 public:
  AutocastScope(MixedPrecision precision, const torch::Device& device);
  explicit AutocastScope(const AutocastState& state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState previous_;
};

}  // namespace tune::precision
