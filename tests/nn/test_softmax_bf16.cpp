// The softmax of bf16 scores (nn/softmax_bf16.h) against the float64 softmax of the same values and LibTorch's
// softmax(scores, -1, kFloat): masked keys, NaN and -inf rows, thread splits, fallbacks and autograd.
#include <catch2/catch.hpp>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "common/scoped_env.h"
#include "tune/nn/softmax_bf16.h"

namespace {

using tune::nn::softmax_of_bf16_scores;

torch::Tensor float64_softmax(const torch::Tensor& scores) { return torch::softmax(scores.to(torch::kDouble), -1); }

// bf16 scores like attention logits: spread over a few units, some rows far apart in scale.
torch::Tensor random_scores(int64_t rows, int64_t length) {
  return (torch::randn({rows, length}) * 4 + torch::randn({rows, 1}) * 20).to(torch::kBFloat16);
}

// The bf16 value nearest `value` (round to nearest even, as a cast does).
torch::Tensor rounded_to_bf16(const torch::Tensor& value) { return value.to(torch::kFloat).to(torch::kBFloat16); }

}  // namespace

TEST_CASE("softmax of bf16 scores: fp32 and bf16 results against the float64 softmax", "[nn][softmax]") {
  torch::manual_seed(21);
  for (const int64_t length : {1, 7, 8, 16, 17, 64, 256, 1000}) {
    INFO("row length " << length);
    const auto scores = random_scores(64, length);
    REQUIRE(tune::nn::softmax_uses_tune_kernel(scores));
    const auto reference = float64_softmax(scores);
    const auto fp32 = softmax_of_bf16_scores(scores, torch::kFloat);
    REQUIRE(fp32.scalar_type() == torch::kFloat);
    REQUIRE(fp32.sizes() == scores.sizes());
    // A few fp32 ulps of each probability (exp to ~2 ulps, the division one rounding, and the row sum's roundings,
    // which grow with the row: 16 lanes of up to 63 terms each at 1000).
    const auto relative = ((fp32.to(torch::kDouble) - reference).abs() / reference.clamp_min(1e-30));
    CHECK(relative.max().item<double>() < (length <= 256 ? 6e-7 : 2e-6));
    // Each row sums to 1 within its length's roundings.
    CHECK((fp32.to(torch::kDouble).sum(-1) - 1).abs().max().item<double>() < 1e-6 * std::max<double>(4, length));
    // bf16: the fp32 value rounded; so the float64 value rounded, except where that lies within a few fp32 ulps of a
    // rounding boundary (then one bf16 ulp off).
    const auto bf16 = softmax_of_bf16_scores(scores, torch::kBFloat16);
    REQUIRE(bf16.scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(bf16, rounded_to_bf16(fp32)));
    const auto exact = rounded_to_bf16(reference);
    const double share = bf16.eq(exact).to(torch::kDouble).mean().item<double>();
    CHECK(share >= 0.995);
    const auto ulp = reference.abs().clamp_min(1e-38) * std::ldexp(1.0, -7);  // bf16: 8 significant bits
    CHECK(((bf16.to(torch::kDouble) - reference).abs() / ulp).max().item<double>() <= 1.0);
  }
}

TEST_CASE("softmax of bf16 scores: within a few fp32 ulps of LibTorch's", "[nn][softmax]") {
  torch::manual_seed(22);
  const auto scores = random_scores(512, 256).view({2, 4, 64, 256});
  const auto ours = softmax_of_bf16_scores(scores, torch::kFloat);
  const auto libtorch = torch::softmax(scores, -1, torch::kFloat);
  CHECK(((ours - libtorch).abs() / libtorch.abs().clamp_min(1e-30)).max().item<double>() < 1e-6);
  const auto ours_bf16 = softmax_of_bf16_scores(scores, torch::kBFloat16);
  CHECK(ours_bf16.eq(libtorch.to(torch::kBFloat16)).to(torch::kDouble).mean().item<double>() >= 0.995);
}

TEST_CASE("softmax of bf16 scores: masked keys get exactly 0; NaN and all -inf rows are NaN", "[nn][softmax]") {
  const float lowest = -3.3895313892515355e38f;  // bf16's lowest finite value, as tune's attention masks use
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto rows = torch::tensor({{1.0f, lowest, 2.0f, -inf, 0.5f},
                             {lowest, lowest, lowest, lowest, lowest},
                             {-inf, -inf, -inf, -inf, -inf},
                             {1.0f, nan, 2.0f, 3.0f, 4.0f},
                             {0.0f, -100.0f, -86.0f, -88.0f, -1.0f}})
                  .to(torch::kBFloat16);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO("output " << dtype);
    const auto got = softmax_of_bf16_scores(rows, dtype).to(torch::kDouble);
    const auto expected = torch::softmax(rows.to(torch::kDouble), -1);
    // Row 0: the visible keys as the float64 softmax, the masked ones exactly 0.
    CHECK(got[0][1].item<double>() == 0.0);
    CHECK(got[0][3].item<double>() == 0.0);
    CHECK(torch::allclose(got[0], expected[0], 1e-2, 0));
    // Row 1: every key at the same (lowest) logit: uniform, as LibTorch's (the mask hides nothing from itself).
    CHECK(torch::allclose(got[1], torch::full({5}, 0.2, torch::kDouble), 1e-2, 0));
    // Rows 2 and 3: NaN throughout, as LibTorch's softmax gives.
    CHECK(got[2].isnan().all().item<bool>());
    CHECK(got[3].isnan().all().item<bool>());
    CHECK(torch::softmax(rows[2].to(torch::kFloat), -1).isnan().all().item<bool>());
    // Row 4: a logit more than 87 below the maximum is 0 (fp32's normal range ends at e^-87), one above is not.
    CHECK(got[4][1].item<double>() == 0.0);
    CHECK(got[4][3].item<double>() == 0.0);
    CHECK(got[4][2].item<double>() > 0.0);
  }
}

TEST_CASE("softmax of bf16 scores: the same bits however the rows are split over threads", "[nn][softmax]") {
  torch::manual_seed(23);
  const auto scores = random_scores(4096, 64);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto serial = softmax_of_bf16_scores(scores, torch::kBFloat16);
  const auto serial_fp32 = softmax_of_bf16_scores(scores, torch::kFloat);
  at::set_num_threads(4);
  const auto parallel = softmax_of_bf16_scores(scores, torch::kBFloat16);
  const auto parallel_fp32 = softmax_of_bf16_scores(scores, torch::kFloat);
  at::set_num_threads(threads);
  CHECK(torch::equal(serial, parallel));
  CHECK(torch::equal(serial_fp32, parallel_fp32));
}

TEST_CASE("softmax of bf16 scores: LibTorch's softmax for other dtypes, layouts, and TUNE_CPU_SOFTMAX=libtorch",
          "[nn][softmax]") {
  torch::manual_seed(24);
  const auto scores = random_scores(32, 48);
  const auto libtorch = torch::softmax(scores, -1, torch::kFloat);
  const auto fp32_scores = scores.to(torch::kFloat);
  CHECK_FALSE(tune::nn::softmax_uses_tune_kernel(fp32_scores));
  CHECK(torch::equal(softmax_of_bf16_scores(fp32_scores, torch::kFloat), torch::softmax(fp32_scores, -1)));
  const auto transposed = scores.t();  // not contiguous
  CHECK_FALSE(tune::nn::softmax_uses_tune_kernel(transposed));
  CHECK(torch::equal(softmax_of_bf16_scores(transposed, torch::kBFloat16),
                     torch::softmax(transposed, -1, torch::kFloat).to(torch::kBFloat16)));
  // A double input stays double, as softmax(x, -1, promote(double, float)) does.
  CHECK(softmax_of_bf16_scores(scores.to(torch::kDouble), torch::kDouble).scalar_type() == torch::kDouble);
  const tune::testing::ScopedEnv forced("TUNE_CPU_SOFTMAX", "libtorch");
  // The setting is read once per process: this case only checks it when it runs first (ctest runs each case alone).
  if (!tune::nn::softmax_uses_tune_kernel(scores)) {
    CHECK(torch::equal(softmax_of_bf16_scores(scores, torch::kFloat), libtorch));
  }
}

TEST_CASE("softmax of bf16 scores with autograd: LibTorch's gradient of softmax(x, -1, kFloat)", "[nn][softmax]") {
  torch::manual_seed(25);
  const auto scores = random_scores(16, 40).requires_grad_(true);
  const auto upstream = torch::randn({16, 40});
  const auto ours = tune::nn::softmax_of_bf16_scores_differentiable(scores);
  CHECK(ours.scalar_type() == torch::kFloat);
  const auto grad = torch::autograd::grad({ours}, {scores}, {upstream})[0];
  const auto reference_scores = scores.detach().clone().requires_grad_(true);
  const auto theirs = torch::softmax(reference_scores, -1, torch::kFloat);
  const auto expected = torch::autograd::grad({theirs}, {reference_scores}, {upstream})[0];
  REQUIRE(grad.scalar_type() == torch::kBFloat16);
  // Both round an fp32 gradient to bf16; the probabilities they start from differ by fp32 ulps.
  const auto diff = (grad.to(torch::kDouble) - expected.to(torch::kDouble)).abs();
  CHECK(diff.max().item<double>() <= std::ldexp(1.0, -7) * expected.abs().max().item<double>());
  CHECK(grad.eq(expected).to(torch::kDouble).mean().item<double>() >= 0.99);
  // From the same probabilities, LibTorch's softmax backward itself (its half-to-float form, taken to the input's
  // dtype): the same bits.
  const auto again = tune::nn::softmax_of_bf16_scores_differentiable(scores);
  const auto same_start = torch::autograd::grad({again}, {scores}, {upstream})[0];
  const auto direct = at::_softmax_backward_data(upstream, again.detach(), -1, torch::kBFloat16);
  CHECK(torch::equal(same_start, direct.to(torch::kBFloat16)));
}


TEST_CASE("softmax and its backward in one pass: the float64 formula, and LibTorch's path", "[nn][softmax]") {
  torch::manual_seed(26);
  for (const int64_t length : {8, 17, 256}) {
    INFO("row length " << length);
    const auto scores = random_scores(96, length);
    const auto grad = (torch::randn({96, length}) * 0.1).to(torch::kBFloat16);
    REQUIRE(tune::nn::softmax_backward_uses_tune_kernel(scores, grad));
    const auto [probabilities, grad_scores] = tune::nn::softmax_and_backward_of_bf16_scores(scores, grad);
    REQUIRE(probabilities.scalar_type() == torch::kBFloat16);
    REQUIRE(grad_scores.scalar_type() == torch::kBFloat16);
    // The probabilities: the forward kernel's, bit for bit.
    CHECK(torch::equal(probabilities, softmax_of_bf16_scores(scores, torch::kBFloat16)));
    // The gradient against float64: p (dp - sum p dp), within a bf16 rounding of each row's largest entry.
    const auto p = float64_softmax(scores);
    const auto dp = grad.to(torch::kDouble);
    const auto reference = p * (dp - (p * dp).sum(-1, true));
    const auto row_scale = reference.abs().amax(-1, true).clamp_min(1e-30);
    CHECK(((grad_scores.to(torch::kDouble) - reference).abs() / row_scale).max().item<double>() <= std::ldexp(1.0, -7));
    // LibTorch's path (fp32 softmax, the gradient cast to fp32, its softmax backward, the cast back): nearly all equal.
    const auto fp32 = torch::softmax(scores, -1, torch::kFloat);
    const auto libtorch =
        at::_softmax_backward_data(grad.to(torch::kFloat), fp32, -1, torch::kFloat).to(torch::kBFloat16);
    CHECK(grad_scores.eq(libtorch).to(torch::kDouble).mean().item<double>() >= 0.98);
  }
  // A NaN row is NaN in both outputs; other shapes, dtypes and layouts are not this kernel's.
  auto scores = random_scores(2, 8);
  scores[1][3] = std::numeric_limits<float>::quiet_NaN();
  const auto [probabilities, grad_scores] =
      tune::nn::softmax_and_backward_of_bf16_scores(scores, torch::ones({2, 8}).to(torch::kBFloat16));
  CHECK(probabilities[1].isnan().all().item<bool>());
  CHECK(grad_scores[1].isnan().all().item<bool>());
  CHECK_FALSE(probabilities[0].isnan().any().item<bool>());
  CHECK_FALSE(tune::nn::softmax_backward_uses_tune_kernel(scores, torch::ones({2, 8})));
  CHECK_FALSE(tune::nn::softmax_backward_uses_tune_kernel(scores, torch::ones({8, 2}).to(torch::kBFloat16).t()));
}
