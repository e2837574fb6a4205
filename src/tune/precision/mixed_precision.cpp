// Mixed precision settings and autocast scopes. Every LibTorch-version difference in the autocast API goes
// through tune::compat; this file only decides what state to enter and how to leave it.
#include "tune/precision/mixed_precision.h"

#include <fmt/format.h>

#include "tune/compat/torch_compat.h"
#include "tune/core/error.h"

namespace tune::precision {

MixedPrecision parse_mixed_precision(const std::string& name) {
  if (name == "bf16") return MixedPrecision::bf16;
  if (name == "fp16") return MixedPrecision::fp16;
  if (name == "no") return MixedPrecision::no;
  throw UsageError(fmt::format("mixed_precision: unknown value '{}'; expected one of bf16, fp16, no", name));
}

std::string to_string(MixedPrecision precision) {
  switch (precision) {
    case MixedPrecision::bf16:
      return "bf16";
    case MixedPrecision::fp16:
      return "fp16";
    case MixedPrecision::no:
      return "no";
  }
  return "no";
}

torch::ScalarType compute_dtype(MixedPrecision precision) {
  switch (precision) {
    case MixedPrecision::bf16:
      return torch::kBFloat16;
    case MixedPrecision::fp16:
      return torch::kHalf;
    case MixedPrecision::no:
      return torch::kFloat;
  }
  return torch::kFloat;
}

AutocastState AutocastState::current() {
  AutocastState state;
  state.cpu_enabled = compat::autocast_cpu_enabled();
  state.cpu_dtype = compat::autocast_cpu_dtype();
  state.cuda_enabled = compat::autocast_cuda_enabled();
  state.cuda_dtype = compat::autocast_cuda_dtype();
  return state;
}

namespace {

void apply(const AutocastState& state) {
  compat::set_autocast_cpu_enabled(state.cpu_enabled);
  compat::set_autocast_cpu_dtype(state.cpu_dtype);
  compat::set_autocast_cuda_enabled(state.cuda_enabled);
  compat::set_autocast_cuda_dtype(state.cuda_dtype);
}

// The state for `precision` on `device`, leaving the other device's settings as they are. Validates before
// anything is changed, so a throwing constructor leaves the thread's state untouched.
AutocastState state_for(MixedPrecision precision, const torch::Device& device) {
  AutocastState state = AutocastState::current();
  const bool enabled = precision != MixedPrecision::no;
  if (device.is_cpu()) {
    if (precision == MixedPrecision::fp16 && !compat::cpu_autocast_supports_fp16()) {
      throw UsageError(fmt::format(
          "mixed_precision: fp16 on device cpu is not supported: LibTorch {}.{} autocasts CPU ops to bf16 only, "
          "fp16 autocast needs CUDA on LibTorch 1.13.\n"
          "---> HINT: set mixed_precision=bf16 for CPU (or mixed_precision=no for fp32), or run on a CUDA device",
          TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR));
    }
    state.cpu_enabled = enabled;
    if (enabled) state.cpu_dtype = compute_dtype(precision);
  } else if (device.is_cuda()) {
    state.cuda_enabled = enabled;
    if (enabled) state.cuda_dtype = compute_dtype(precision);
  } else if (enabled) {
    throw UsageError(fmt::format("mixed_precision: {} on device {} is not supported; autocast runs on cpu and cuda.\n"
                                 "---> HINT: set mixed_precision=no",
                                 to_string(precision), device.str()));
  }
  return state;
}

}  // namespace

AutocastScope::AutocastScope(MixedPrecision precision, const torch::Device& device)
    : AutocastScope(state_for(precision, device)) {}

AutocastScope::AutocastScope(const AutocastState& state) : previous_(AutocastState::current()) {
  apply(state);
  // As torch.autocast: the nesting depth decides when the cast cache (fp32 weights cast to bf16/fp16 once per
  // scope) may be dropped, so that an inner scope does not free casts the outer one still reuses.
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  // Leaving the outermost scope frees the cached low-precision copies of the weights; without this they live
  // until the thread ends and, worse, go stale after an optimizer step updates the fp32 weights in place.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  apply(previous_);
}

}  // namespace tune::precision
