// The attention core against an explicit float64 formula, and its probability-recomputing autograd form against
// the plain one: same forward bits, same gradients, nothing [B, H, T, S] kept from forward to backward.
#include <catch2/catch.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>

#include "common/scoped_env.h"
#include "tune/core/cpu_gemm_mode.h"
#include "tune/core/memory_tracker.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/attention_mask.h"
#include "tune/nn/block_runner.h"
#include "tune/precision/mixed_precision.h"

using tune::nn::attention_core;
using tune::nn::attention_core_recomputing_probabilities;

namespace {

struct Inputs {
  torch::Tensor query, key, value, mask;
  double scale;
};

// 2 sequences, 4 query heads sharing 2 key/value heads (grouped-query), 5 queries over 7 keys, head_dim 3, and an
// additive mask that hides a different set of keys per sequence and query (never a whole row).
Inputs make_inputs(torch::ScalarType dtype, bool requires_grad) {
  torch::manual_seed(11);
  const auto options = torch::TensorOptions().dtype(dtype).requires_grad(requires_grad);
  Inputs in;
  in.query = torch::randn({2, 4, 5, 3}, options);
  in.key = torch::randn({2, 2, 7, 3}, options);
  in.value = torch::randn({2, 2, 7, 3}, options);
  const auto hidden = torch::rand({2, 1, 5, 7}) < 0.3;
  hidden.select(3, 0).fill_(false);  // key 0 always visible
  in.mask = torch::zeros({2, 1, 5, 7}, torch::kFloat).masked_fill(hidden, -1e9);
  in.scale = 1.0 / std::sqrt(3.0);
  return in;
}

// softmax(q k^T * scale + mask) v in float64, one query head at a time, key/value head h / groups picked by
// index (not by the expand/reshape the implementation uses), softmax written out as exp(x - max) / sum.
torch::Tensor reference(const Inputs& in) {
  const auto q = in.query.to(torch::kDouble), k = in.key.to(torch::kDouble), v = in.value.to(torch::kDouble);
  const auto mask = in.mask.to(torch::kDouble);
  const int64_t heads = q.size(1), groups = heads / k.size(1);
  std::vector<torch::Tensor> per_head;
  for (int64_t h = 0; h < heads; ++h) {
    const auto qh = q.select(1, h), kh = k.select(1, h / groups), vh = v.select(1, h / groups);
    const auto logits = torch::bmm(qh, kh.transpose(1, 2)) * in.scale + mask.select(1, 0);
    const auto shifted = (logits - std::get<0>(logits.max(-1, true))).exp();
    per_head.push_back(torch::bmm(shifted / shifted.sum(-1, true), vh));
  }
  return torch::stack(per_head, 1);
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

std::vector<torch::Tensor> input_grads(const Inputs& in, const torch::Tensor& output, const torch::Tensor& upstream) {
  return torch::autograd::grad({output}, {in.query, in.key, in.value}, {upstream});
}

}  // namespace

TEST_CASE("attention_core equals the float64 formula, with grouped-query heads and a mask", "[nn][attention]") {
  const Inputs in = make_inputs(torch::kDouble, false);
  CHECK(max_diff(attention_core(in.query, in.key, in.value, in.mask, in.scale), reference(in)) < 1e-12);
  // Without a mask every key is visible.
  Inputs unmasked = in;
  unmasked.mask = torch::zeros_like(in.mask);
  CHECK(max_diff(attention_core(in.query, in.key, in.value, torch::Tensor(), in.scale), reference(unmasked)) < 1e-12);
}

TEST_CASE("recomputing attention: same forward bits, gradients equal the float64 reference", "[nn][attention]") {
  SECTION("float64: against autograd through the explicit formula") {
    const Inputs in = make_inputs(torch::kDouble, true);
    const auto upstream = torch::randn({2, 4, 5, 3}, torch::kDouble);
    const auto recomputing = attention_core_recomputing_probabilities(in.query, in.key, in.value, in.mask, in.scale);
    CHECK(max_diff(recomputing, reference(in)) < 1e-12);
    const auto got = input_grads(in, recomputing, upstream);
    const auto expected = input_grads(in, reference(in), upstream);
    for (size_t i = 0; i < 3; ++i) {
      INFO("input " << i);
      CHECK(max_diff(got[i], expected[i]) < 1e-12);
    }
  }
  SECTION("float32: forward bitwise equal to the plain form, gradients within rounding") {
    const Inputs in = make_inputs(torch::kFloat, true);
    const auto upstream = torch::randn({2, 4, 5, 3});
    const auto plain = attention_core(in.query, in.key, in.value, in.mask, in.scale);
    const auto recomputing = attention_core_recomputing_probabilities(in.query, in.key, in.value, in.mask, in.scale);
    CHECK(torch::equal(plain, recomputing));
    const auto got = input_grads(in, recomputing, upstream);
    const auto expected = input_grads(in, plain, upstream);
    for (size_t i = 0; i < 3; ++i) {
      INFO("input " << i);
      CHECK(got[i].scalar_type() == torch::kFloat);
      CHECK(max_diff(got[i], expected[i]) < 1e-5);
    }
  }
}

TEST_CASE("recomputing attention: chunked backward skips hidden keys exactly (causal, packed, padded)",
          "[nn][attention]") {
  // Long enough for several query chunks (recompute_chunk_rows: T/4 rows, at least 512 by default; 275 rows with the
  // 128-row minimum a run may measure faster).
  const char* minimum = GENERATE("512", "128");
  const tune::testing::ScopedEnv chunk_rows("TUNE_ATTENTION_CHUNK_ROWS", std::string(minimum));
  CHECK(tune::nn::recompute_chunk_rows(1100) == (std::string(minimum) == "512" ? 512 : 275));
  torch::manual_seed(13);
  const int64_t length = 1100;
  const auto options = torch::TensorOptions().dtype(torch::kDouble).requires_grad(true);
  const auto query = torch::randn({2, 2, length, 4}, options);
  const auto key = torch::randn({2, 1, length, 4}, options);
  const auto value = torch::randn({2, 1, length, 4}, options);
  const auto upstream = torch::randn({2, 2, length, 4}, torch::kDouble);
  // Sequence 0: three packed segments then padding; sequence 1: one segment over everything.
  auto segments = torch::zeros({2, length}, torch::kInt64);
  segments[0].slice(0, 300, 700).fill_(1);
  segments[0].slice(0, 700, 1000).fill_(2);
  segments[0].slice(0, 1000, length).fill_(-1);
  for (const auto& mask : {tune::nn::make_causal_mask(length, 0, {}, torch::kCPU),
                           tune::nn::make_causal_mask(length, 0, segments, torch::kCPU)}) {
    const auto plain = attention_core(query, key, value, mask, 0.4);
    const auto recomputing = attention_core_recomputing_probabilities(query, key, value, mask, 0.4);
    CHECK(max_diff(plain, recomputing) < 1e-12);  // chunked: the same values up to float64 rounding
    const auto got = torch::autograd::grad({recomputing}, {query, key, value}, {upstream});
    const auto expected = torch::autograd::grad({plain}, {query, key, value}, {upstream});
    for (size_t i = 0; i < 3; ++i) {
      INFO("input " << i);
      CHECK(max_diff(got[i], expected[i]) < 1e-12);
    }
  }
}

TEST_CASE("recomputing attention: chunks of the batch give the plain core's values and gradients",
          "[nn][attention]") {
  // 12 sequences of 2 heads x 512 x 512 scores: 4 sequences a chunk (kRecomputeChunkScores), 3 chunks.
  const int64_t batch = 12, heads = 2, length = 512;
  REQUIRE(tune::nn::recompute_chunk_batch(batch, heads, length, length) == 4);
  CHECK(tune::nn::recompute_chunk_batch_share(batch, heads, length, length) == Approx(1.0 / 3.0));
  // Spread evenly: 16 entries at most 5 a chunk run as 4 chunks of 4; one entry over the budget is its own chunk.
  CHECK(tune::nn::recompute_chunk_batch(16, 6, 256, 256) == 4);
  CHECK(tune::nn::recompute_chunk_batch(3, 64, 512, 512) == 1);
  CHECK(tune::nn::recompute_chunk_batch(2, 1, 8, 8) == 2);
  torch::manual_seed(14);
  SECTION("float64 against the float64 formula, with grouped-query heads and a per-sequence padding mask") {
    const auto options = torch::TensorOptions().dtype(torch::kDouble).requires_grad(true);
    Inputs in;
    in.query = torch::randn({batch, heads, length, 4}, options);
    in.key = torch::randn({batch, 1, length, 4}, options);
    in.value = torch::randn({batch, 1, length, 4}, options);
    const auto hidden = torch::arange(length).unsqueeze(0) >= (length - 37 * torch::arange(batch)).unsqueeze(1);
    in.mask = torch::zeros({batch, 1, 1, length}, torch::kDouble).masked_fill(hidden.view({batch, 1, 1, length}), -1e9);
    in.mask = in.mask.expand({batch, 1, length, length}).contiguous();
    in.scale = 0.3;
    const auto upstream = torch::randn({batch, heads, length, 4}, torch::kDouble);
    const auto got = attention_core_recomputing_probabilities(in.query, in.key, in.value, in.mask, in.scale);
    CHECK(max_diff(got, reference(in)) < 1e-12);
    const auto got_grads = input_grads(in, got, upstream);
    const auto expected = input_grads(in, reference(in), upstream);
    for (size_t i = 0; i < 3; ++i) {
      INFO("input " << i);
      CHECK(max_diff(got_grads[i], expected[i]) < 1e-12);
    }
  }
  SECTION("bf16, no mask: the plain core's forward bits, gradients within bf16 rounding") {
    const auto options = torch::TensorOptions().dtype(torch::kBFloat16).requires_grad(true);
    const auto query = torch::randn({batch, heads, length, 16}, options);
    const auto key = torch::randn({batch, heads, length, 16}, options);
    const auto value = torch::randn({batch, heads, length, 16}, options);
    const auto upstream = torch::randn({batch, heads, length, 16}).to(torch::kBFloat16);
    const auto plain = attention_core(query, key, value, torch::Tensor(), 0.25);
    const auto recomputing = attention_core_recomputing_probabilities(query, key, value, torch::Tensor(), 0.25);
    CHECK(torch::equal(plain, recomputing));
    const auto got = torch::autograd::grad({recomputing}, {query, key, value}, {upstream});
    const auto expected = torch::autograd::grad({plain}, {query, key, value}, {upstream});
    for (size_t i = 0; i < 3; ++i) {
      INFO("input " << i);
      CHECK(got[i].scalar_type() == torch::kBFloat16);
      const double scale = expected[i].to(torch::kDouble).abs().max().item<double>();
      CHECK(max_diff(got[i], expected[i]) <= 0.02 * scale);
    }
  }
}

TEST_CASE("recomputing attention: only the inputs that require grad get one", "[nn][attention]") {
  Inputs in = make_inputs(torch::kFloat, false);
  in.query.set_requires_grad(true);
  const auto out = attention_core_recomputing_probabilities(in.query, in.key, in.value, in.mask, in.scale);
  const auto expected_out = attention_core(in.query, in.key, in.value, in.mask, in.scale);
  const auto got = torch::autograd::grad({out.sum()}, {in.query});
  const auto expected = torch::autograd::grad({expected_out.sum()}, {in.query});
  CHECK(max_diff(got[0], expected[0]) < 1e-5);
  CHECK_THROWS(attention_core_recomputing_probabilities(in.query, in.key, in.value,
                                                        in.mask.clone().requires_grad_(), in.scale));
}

TEST_CASE("recomputing attention under bf16 autocast, backward outside the scope", "[nn][attention]") {
  const Inputs in = make_inputs(torch::kFloat, true);
  const auto upstream = torch::randn({2, 4, 5, 3});
  torch::Tensor plain, recomputing;
  {
    // fp32 inputs: autocast runs the matmuls in bf16, the recompute must too although backward runs outside.
    tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
    plain = attention_core(in.query, in.key, in.value, in.mask, in.scale);
    recomputing = attention_core_recomputing_probabilities(in.query, in.key, in.value, in.mask, in.scale);
  }
  REQUIRE(plain.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(plain, recomputing));
  const auto got = input_grads(in, recomputing, upstream.to(torch::kBFloat16));
  const auto expected = input_grads(in, plain, upstream.to(torch::kBFloat16));
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(got[i].scalar_type() == torch::kFloat);
    // Both backward passes round through bf16; they differ only in operation order.
    CHECK(max_diff(got[i], expected[i]) <= 2e-2 * std::max(1.0, expected[i].abs().max().item<double>()));
  }
}

TEST_CASE("recomputing attention keeps nothing [B, H, T, S] from forward to backward", "[nn][attention][memory]") {
  tune::memory_tracker::install();
  torch::manual_seed(12);
  const int64_t heads = 4, length = 256, head_dim = 8;
  const auto options = torch::TensorOptions().requires_grad(true);
  const auto query = torch::randn({1, heads, length, head_dim}, options);
  const auto key = torch::randn({1, heads, length, head_dim}, options);
  const auto value = torch::randn({1, heads, length, head_dim}, options);
  const auto mask = tune::nn::make_causal_mask(length, 0, {}, torch::kCPU);
  const int64_t probabilities_bytes = heads * length * length * 4;  // fp32
  const int64_t context_bytes = heads * length * head_dim * 4;

  // Bytes the graph holds after forward, beyond the inputs: measured with the output alive.
  auto held_after_forward = [&](bool recompute) {
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    const auto out = recompute ? attention_core_recomputing_probabilities(query, key, value, mask, 0.35)
                               : attention_core(query, key, value, mask, 0.35);
    const int64_t held = tune::memory_tracker::cpu_live_bytes() - before;
    out.sum().backward();
    return held;
  };
  const int64_t plain = held_after_forward(false);
  const int64_t recomputing = held_after_forward(true);
  INFO("held after forward: plain " << plain << " bytes, recomputing " << recomputing << " bytes");
  CHECK(plain >= probabilities_bytes);
  CHECK(recomputing <= context_bytes + 4096);
}

TEST_CASE("run_attention_core recomputes the probabilities wherever autograd would keep them until backward",
          "[nn][attention]") {
  struct Recomputing : tune::nn::PlainBlockRunner {
    bool recomputes(tune::nn::RegionKind kind) const override { return kind == tune::nn::RegionKind::attention_core; }
  };
  // The choice between the plain and the recomputing form is made where the fused kernels are not taken.
  const tune::testing::ScopedEnv plain_core("TUNE_CPU_ATTENTION", "plain");
  const Inputs in = make_inputs(torch::kFloat, true);
  Recomputing recomputing;
  tune::nn::PlainBlockRunner plain;
  auto node = [&](tune::nn::BlockRunner* runner) {
    const auto out = tune::nn::run_attention_core(runner, in.query, in.key, in.value, in.mask, in.scale);
    return out.grad_fn() ? out.grad_fn()->name() : std::string("none");
  };
  // Under grad: selective's runner, a plain one and none alike (a plainly run block keeps its graph until backward).
  CHECK(node(&recomputing).find("RecomputingAttention") != std::string::npos);
  CHECK(node(&plain).find("RecomputingAttention") != std::string::npos);
  CHECK(node(nullptr).find("RecomputingAttention") != std::string::npos);
  {
    // A checkpointed block's recompute: its graph lives only through its own backward, so the plain form (one
    // product fewer); selective's core, which no block recompute wraps, recomputes still.
    const tune::nn::RecomputeScope in_recompute;
    CHECK(node(&plain).find("RecomputingAttention") == std::string::npos);
    CHECK(node(&plain) != "none");
    CHECK(node(&recomputing).find("RecomputingAttention") != std::string::npos);
    // A multi-block segment's recompute (policy sqrt) before its last block: that block's graph outlives its own
    // backward, so the recomputing form again.
    const tune::nn::SegmentBlockScope outliving;
    CHECK(node(&plain).find("RecomputingAttention") != std::string::npos);
  }
  {
    // Where the run measured the recomputing core at least as fast inside recomputes (bf16/fp16 on the CPU), it
    // takes that form there too; an fp32 run's recomputes keep the plain one.
    tune::clear_measured_cpu_kernels();
    tune::set_measured_recompute_core_recomputes(torch::kBFloat16, true);
    const tune::nn::RecomputeScope in_recompute;
    CHECK(node(&plain).find("RecomputingAttention") == std::string::npos);  // these inputs are fp32
    const auto q = in.query.detach().to(torch::kBFloat16).requires_grad_();
    const auto k = in.key.detach().to(torch::kBFloat16).requires_grad_();
    const auto v = in.value.detach().to(torch::kBFloat16).requires_grad_();
    const auto out = tune::nn::run_attention_core(&plain, q, k, v, in.mask, in.scale);
    CHECK(out.grad_fn()->name().find("RecomputingAttention") != std::string::npos);
    tune::clear_measured_cpu_kernels();
    const auto unmeasured = tune::nn::run_attention_core(&plain, q, k, v, in.mask, in.scale);
    CHECK(unmeasured.grad_fn()->name().find("RecomputingAttention") == std::string::npos);
  }
  torch::NoGradGuard no_grad;
  CHECK(node(&recomputing) == "none");
  CHECK(node(&plain) == "none");
}

TEST_CASE("attention_core_form: what run_attention_core takes, and so what the estimates count", "[nn][attention]") {
  using tune::nn::AttentionCoreForm;
  using tune::nn::attention_core_form;
  const auto cpu = c10::DeviceType::CPU;
  const tune::testing::ScopedEnv plain_core("TUNE_CPU_ATTENTION", "plain");
  CHECK(attention_core_form(cpu, torch::kBFloat16, /*kept_until_backward=*/true) == AttentionCoreForm::recomputing);
  CHECK(attention_core_form(cpu, torch::kBFloat16, /*kept_until_backward=*/false) == AttentionCoreForm::plain);
  CHECK(attention_core_form(cpu, torch::kDouble, true, /*selective=*/true) == AttentionCoreForm::recomputing);
  CHECK(attention_core_form(c10::DeviceType::CUDA, torch::kBFloat16, true) == AttentionCoreForm::fused);
  CHECK(attention_core_form(c10::DeviceType::CUDA, torch::kBFloat16, false) == AttentionCoreForm::fused);
  // Soft-capped scores never take the fused kernels, on any device.
  CHECK(attention_core_form(c10::DeviceType::CUDA, torch::kBFloat16, true, false, /*softcapped=*/true) ==
        AttentionCoreForm::recomputing);
  const tune::testing::ScopedEnv fused_core("TUNE_CPU_ATTENTION", "fused");
  CHECK(attention_core_form(cpu, torch::kBFloat16, true) == AttentionCoreForm::fused);
  CHECK(attention_core_form(cpu, torch::kBFloat16, false) == AttentionCoreForm::fused);
  // Selective's layers keep tune's chunked recompute on the CPU (it skips the keys a packing mask hides).
  CHECK(attention_core_form(cpu, torch::kBFloat16, true, /*selective=*/true) == AttentionCoreForm::recomputing);
}

TEST_CASE("attention_core_form inside a block recompute follows the measured choice", "[nn][attention]") {
  using tune::nn::AttentionCoreForm;
  using tune::nn::attention_core_form;
  const auto cpu = c10::DeviceType::CPU;
  const tune::testing::ScopedEnv plain_core("TUNE_CPU_ATTENTION", "plain");
  tune::clear_measured_cpu_kernels();
  auto in_recompute = [&](c10::DeviceType device, c10::ScalarType dtype) {
    return attention_core_form(device, dtype, /*kept_until_backward=*/false, false, false, /*in_block_recompute=*/true);
  };
  CHECK(in_recompute(cpu, torch::kBFloat16) == AttentionCoreForm::plain);  // nothing measured
  tune::set_measured_recompute_core_recomputes(torch::kBFloat16, true);
  CHECK(in_recompute(cpu, torch::kBFloat16) == AttentionCoreForm::recomputing);
  CHECK(in_recompute(cpu, torch::kHalf) == AttentionCoreForm::plain);  // measured per dtype
  CHECK(in_recompute(cpu, torch::kFloat) == AttentionCoreForm::plain);
  // Without gradients (a forward alone) the plain form whatever was measured.
  CHECK(attention_core_form(cpu, torch::kBFloat16, false) == AttentionCoreForm::plain);
  tune::set_measured_recompute_core_recomputes(torch::kBFloat16, false);
  CHECK(in_recompute(cpu, torch::kBFloat16) == AttentionCoreForm::plain);
  tune::clear_measured_cpu_kernels();
}

TEST_CASE("on the CPU the fused core replaces the plain one for fp32, for bf16/fp16 only where LibTorch's kernels "
          "for them are vectorised, never for float64 or the recomputing core", "[nn][attention]") {
  using tune::nn::uses_fused_attention;
  const auto cpu = c10::DeviceType::CPU;
  CHECK(uses_fused_attention(c10::DeviceType::CUDA, torch::kBFloat16));
  CHECK(uses_fused_attention(cpu, torch::kFloat));
  CHECK_FALSE(uses_fused_attention(cpu, torch::kDouble));
  CHECK_FALSE(uses_fused_attention(cpu, torch::kFloat, /*recomputing=*/true));
  CHECK(uses_fused_attention(c10::DeviceType::CUDA, torch::kFloat, /*recomputing=*/true));
  // bf16/fp16: where LibTorch's own kernels for them are vectorised, whatever kernels tune's products take.
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    CHECK(uses_fused_attention(cpu, dtype) == tune::libtorch_cpu_kernels_native(dtype));
    for (const char* gemm : {"native", "fp32"}) {
      const tune::testing::ScopedEnv forced("TUNE_CPU_GEMM", gemm);
      CHECK(uses_fused_attention(cpu, dtype) == tune::libtorch_cpu_kernels_native(dtype));
    }
  }
  {
    const tune::testing::ScopedEnv fused("TUNE_CPU_ATTENTION", "fused");
    CHECK(uses_fused_attention(cpu, torch::kBFloat16));
    CHECK_FALSE(uses_fused_attention(cpu, torch::kDouble));
  }
  {
    const tune::testing::ScopedEnv plain("TUNE_CPU_ATTENTION", "plain");
    CHECK_FALSE(uses_fused_attention(cpu, torch::kFloat));
  }
  // And run_attention_core follows it: fused for a plain runner, the recomputing core for selective's.
  struct Recomputing : tune::nn::PlainBlockRunner {
    bool recomputes(tune::nn::RegionKind kind) const override { return kind == tune::nn::RegionKind::attention_core; }
  };
  Recomputing recomputing;
  tune::nn::PlainBlockRunner plain;
  const Inputs in = make_inputs(torch::kFloat, true);
  const auto out = tune::nn::run_attention_core(&plain, in.query, in.key, in.value, in.mask, in.scale);
  REQUIRE(out.grad_fn());
  CHECK(out.grad_fn()->name().find("ScaledDotProduct") != std::string::npos);
  CHECK(max_diff(out, reference(in)) < 1e-5);
  const auto recomputed = tune::nn::run_attention_core(&recomputing, in.query, in.key, in.value, in.mask, in.scale);
  REQUIRE(recomputed.grad_fn());
  CHECK(recomputed.grad_fn()->name().find("RecomputingAttention") != std::string::npos);
}

TEST_CASE("fused attention (scaled_dot_product_attention) equals the float64 formula and the plain gradients",
          "[nn][attention]") {
  const Inputs in = make_inputs(torch::kDouble, true);
  const auto fused = tune::nn::attention_core_fused(in.query, in.key, in.value, in.mask, in.scale);
  CHECK(max_diff(fused, reference(in)) < 1e-12);
  const auto upstream = torch::randn_like(fused);
  const auto fused_grads = input_grads(in, fused, upstream);
  const auto plain_grads = input_grads(in, attention_core(in.query, in.key, in.value, in.mask, in.scale), upstream);
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(max_diff(fused_grads[i], plain_grads[i]) < 1e-12);
  }
}

TEST_CASE("fused attention: a plain causal mask may be dropped for is_causal, with the same result",
          "[nn][attention]") {
  torch::manual_seed(12);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  const auto query = torch::randn({2, 4, 6, 3}, options), key = torch::randn({2, 2, 6, 3}, options);
  const auto value = torch::randn({2, 2, 6, 3}, options);
  const auto mask = tune::nn::make_causal_mask(6, 0, torch::Tensor(), torch::kCPU);
  const auto with_mask = tune::nn::attention_core_fused(query, key, value, mask, 0.5, false);
  const auto as_causal = tune::nn::attention_core_fused(query, key, value, mask, 0.5, true);
  CHECK(max_diff(with_mask, attention_core(query, key, value, mask, 0.5)) < 1e-12);
  CHECK(max_diff(as_causal, with_mask) < 1e-12);
}

TEST_CASE("fused attention on CUDA under bf16 autocast agrees with the plain core", "[nn][attention][cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: the CUDA case is not exercised");
    return;
  }
  torch::manual_seed(13);
  const torch::Device cuda(torch::kCUDA, 0);
  const auto options = torch::TensorOptions().device(cuda).dtype(torch::kBFloat16);
  const auto query = torch::randn({2, 8, 256, 64}, options), key = torch::randn({2, 2, 256, 64}, options);
  const auto value = torch::randn({2, 2, 256, 64}, options);
  const auto mask = tune::nn::make_causal_mask(256, 0, torch::Tensor(), cuda);
  const auto plain = attention_core(query.to(torch::kDouble), key.to(torch::kDouble), value.to(torch::kDouble),
                                    mask, 0.125);
  for (bool causal : {true, false}) {  // flash kernel (mask dropped), memory-efficient kernel (mask given)
    INFO("causal " << causal);
    const auto fused = tune::nn::attention_core_fused(query, key, value, mask, 0.125, causal);
    const double relative = ((fused.to(torch::kDouble) - plain).norm() / plain.norm()).item<double>();
    CHECK(relative < 1e-2);  // bf16 operands: ~3e-3 expected
  }
}

TEST_CASE("recomputing attention: a padding mask broadcast over the queries, across several query chunks",
          "[nn][attention]") {
  // A cross-attention's text mask is [B, 1, 1, S]: one row for every query. With more than 512 queries (Sana's image
  // tokens) the chunks must keep that row rather than slice it by their query range.
  torch::manual_seed(17);
  const int64_t queries = 1100, keys = 9;
  const auto options = torch::TensorOptions().dtype(torch::kDouble).requires_grad(true);
  const auto query = torch::randn({2, 2, queries, 4}, options);
  const auto key = torch::randn({2, 2, keys, 4}, options);
  const auto value = torch::randn({2, 2, keys, 4}, options);
  auto mask = torch::zeros({2, 1, 1, keys}, torch::kDouble);
  mask[1].slice(-1, 5).fill_(-10000.0);  // sample 1's last 4 caption tokens are padding
  const auto upstream = torch::randn({2, 2, queries, 4}, torch::kDouble);
  const auto plain = attention_core(query, key, value, mask, 0.5);
  const auto recomputing = attention_core_recomputing_probabilities(query, key, value, mask, 0.5);
  CHECK(max_diff(plain, recomputing) < 1e-12);
  const auto got = torch::autograd::grad({recomputing}, {query, key, value}, {upstream});
  const auto expected = torch::autograd::grad({plain}, {query, key, value}, {upstream});
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(max_diff(got[i], expected[i]) < 1e-12);
  }
}

TEST_CASE("without gradients run_attention_core never holds a whole batch of scores, and gives the plain form's values",
          "[nn][attention][memory]") {
  // tune's core (not LibTorch's fused kernel), as a checkpointed block's first forward or inference runs it.
  const tune::testing::ScopedEnv plain_core("TUNE_CPU_ATTENTION", "plain");
  tune::memory_tracker::install();
  torch::manual_seed(11);
  // 8 x 4 heads x 512 x 512: 8.4M scores, 16 MiB in bf16 whole; the chunks hold at most 2M.
  const auto query = torch::randn({8, 4, 512, 16}).to(torch::kBFloat16);
  const auto key = torch::randn({8, 4, 512, 16}).to(torch::kBFloat16);
  const auto value = torch::randn({8, 4, 512, 16}).to(torch::kBFloat16);
  const int64_t whole_scores_bytes = 8 * 4 * 512 * 512 * 2;
  torch::NoGradGuard no_grad;
  for (const bool causal : {false, true}) {
    INFO((causal ? "causal mask" : "no mask"));
    const torch::Tensor mask =
        causal ? tune::nn::make_causal_mask(512, 0, torch::Tensor(), torch::kCPU) : torch::Tensor();
    auto transient_of = [](const std::function<torch::Tensor()>& run, torch::Tensor* out) {
      tune::memory_tracker::reset_cpu_peak();
      const int64_t before = tune::memory_tracker::cpu_live_bytes();
      *out = run();
      return tune::memory_tracker::cpu_peak_bytes() - before;
    };
    torch::Tensor whole, chunked;
    const int64_t whole_transient =
        transient_of([&] { return attention_core(query, key, value, mask, 0.25, 0.0); }, &whole);
    const int64_t chunked_transient = transient_of(
        [&] { return tune::nn::run_attention_core(nullptr, query, key, value, mask, 0.25, causal); }, &chunked);
    INFO("transient " << chunked_transient << " bytes against the whole form's " << whole_transient
                      << " (scores alone " << whole_scores_bytes << ")");
    CHECK(whole_transient >= whole_scores_bytes);
    CHECK(chunked_transient < whole_transient / 3);
    // The same rows from the same products (a causal chunk skips keys whose probabilities are exactly 0).
    CHECK((chunked.to(torch::kFloat) - whole.to(torch::kFloat)).abs().max().item<double>() <= 1e-2);
  }
}
