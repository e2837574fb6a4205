// The attention core every test_recipes case measures unless it asks for another: tune's plain core, on every
// CPU. nn::uses_fused_attention picks LibTorch's fused kernel for bf16 only where the CPU has vectorised bf16
// kernels, so without this pin the estimates under test would change with the machine; the cases about the fused
// core set TUNE_CPU_ATTENTION=fused themselves. (Set here rather than in CTest's ENVIRONMENT beside
// TUNE_CPU_GEMM=fp32, where catch_discover_tests splits a list of two variables into two properties.) An explicit
// TUNE_CPU_ATTENTION in the caller's environment wins.
#include <cstdlib>

namespace {

const bool pinned = [] {
  setenv("TUNE_CPU_ATTENTION", "plain", /*overwrite=*/0);
  return true;
}();

}  // namespace
