// Mixed precision settings and AutocastScope: parsing, nesting and restore, the cast-cache nesting counter,
// the fp16-on-CPU error, and the dtype autocast gives a matmul.
#include <catch2/catch.hpp>

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>

#include "tune/compat/torch_compat.h"
#include "tune/core/error.h"
#include "tune/precision/mixed_precision.h"

using tune::precision::AutocastScope;
using tune::precision::AutocastState;
using tune::precision::MixedPrecision;

namespace {

// The autocast nesting depth, read without changing it.
int nesting_depth() {
  const int depth = at::autocast::increment_nesting() - 1;
  at::autocast::decrement_nesting();
  return depth;
}

}  // namespace

TEST_CASE("mixed_precision names parse, print and map to dtypes", "[precision]") {
  using tune::precision::compute_dtype;
  using tune::precision::parse_mixed_precision;
  for (const char* name : {"bf16", "fp16", "no"}) CHECK(tune::precision::to_string(parse_mixed_precision(name)) == name);
  CHECK(compute_dtype(MixedPrecision::bf16) == torch::kBFloat16);
  CHECK(compute_dtype(MixedPrecision::fp16) == torch::kHalf);
  CHECK(compute_dtype(MixedPrecision::no) == torch::kFloat);
  REQUIRE_THROWS_AS(parse_mixed_precision("fp32"), tune::UsageError);
  REQUIRE_THROWS_WITH(parse_mixed_precision("fp32"), Catch::Contains("'fp32'") && Catch::Contains("bf16, fp16, no"));
}

TEST_CASE("AutocastScope nests and restores the previous state", "[precision]") {
  REQUIRE_FALSE(tune::compat::autocast_cpu_enabled());
  const int depth = nesting_depth();
  {
    AutocastScope outer(MixedPrecision::bf16, torch::kCPU);
    CHECK(tune::compat::autocast_cpu_enabled());
    CHECK(tune::compat::autocast_cpu_dtype() == torch::kBFloat16);
    CHECK(nesting_depth() == depth + 1);
    {
      AutocastScope inner(MixedPrecision::no, torch::kCPU);
      CHECK_FALSE(tune::compat::autocast_cpu_enabled());
      CHECK(nesting_depth() == depth + 2);
      {
        const AutocastState captured{true, torch::kBFloat16, false, torch::kHalf};
        AutocastScope reentered(captured);  // how a checkpoint recompute re-enters forward's state
        CHECK(tune::compat::autocast_cpu_enabled());
      }
      CHECK_FALSE(tune::compat::autocast_cpu_enabled());
    }
    CHECK(tune::compat::autocast_cpu_enabled());
    const AutocastState state = AutocastState::current();
    CHECK(state.cpu_enabled);
    CHECK(state.cpu_dtype == torch::kBFloat16);
    CHECK_FALSE(state.cuda_enabled);
  }
  CHECK_FALSE(tune::compat::autocast_cpu_enabled());
  CHECK(nesting_depth() == depth);
}

TEST_CASE("fp16 autocast on CPU is refused with a hint, never coerced", "[precision]") {
  if (tune::compat::cpu_autocast_supports_fp16()) {
    AutocastScope scope(MixedPrecision::fp16, torch::kCPU);
    CHECK(tune::compat::autocast_cpu_dtype() == torch::kHalf);
    return;
  }
  const AutocastState before = AutocastState::current();
  REQUIRE_THROWS_AS(AutocastScope(MixedPrecision::fp16, torch::kCPU), tune::UsageError);
  REQUIRE_THROWS_WITH(AutocastScope(MixedPrecision::fp16, torch::kCPU),
                      Catch::Contains("fp16") && Catch::Contains("CUDA") && Catch::Contains("mixed_precision=bf16"));
  // The failed constructor left the thread's state as it was.
  CHECK(AutocastState::current().cpu_enabled == before.cpu_enabled);
  CHECK(AutocastState::current().cpu_dtype == before.cpu_dtype);
}

TEST_CASE("a matmul inside a bf16 CPU scope returns bf16, outside fp32", "[precision]") {
  torch::manual_seed(0);
  const torch::Tensor a = torch::randn({8, 8});
  const torch::Tensor b = torch::randn({8, 8});
  {
    AutocastScope scope(MixedPrecision::bf16, torch::kCPU);
    const torch::Tensor c = torch::mm(a, b);
    CHECK(c.scalar_type() == torch::kBFloat16);
    // Checked against an outside truth: the same product computed from explicitly rounded bf16 operands.
    CHECK(torch::allclose(c.to(torch::kFloat), torch::mm(a.to(torch::kBFloat16), b.to(torch::kBFloat16)).to(torch::kFloat)));
  }
  CHECK(torch::mm(a, b).scalar_type() == torch::kFloat);
}

TEST_CASE("a no-precision scope on a non-autocast device is a no-op, enabling one is an error", "[precision]") {
  CHECK_NOTHROW(AutocastScope(MixedPrecision::no, torch::Device("meta")));
  REQUIRE_THROWS_AS(AutocastScope(MixedPrecision::bf16, torch::Device("meta")), tune::UsageError);
}

TEST_CASE("fp16 autocast on CUDA", "[precision][cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: fp16 CUDA autocast not checked");
    return;
  }
  const torch::Tensor a = torch::randn({8, 8}, torch::kCUDA);
  AutocastScope scope(MixedPrecision::fp16, torch::kCUDA);
  CHECK(torch::mm(a, a).scalar_type() == torch::kHalf);
}
