// train::CompactGradients and precision::to_bf16_if_exact: gradients held as exact bf16 copies give the update of
// fp32 gradients bit for bit (clipping, gradient accumulation, a parameter whose gradient does not fit, both AdamW
// kernels, held gradients made in several batches), and the narrowing keeps exactly what bf16 can hold.
#include <catch2/catch.hpp>

#include <cstring>

#include "tune/precision/exact_bf16.h"
#include "tune/precision/mixed_precision.h"
#include "tune/train/compact_gradients.h"
#include "tune/train/optimizer_step.h"

namespace {

using tune::train::CompactGradients;

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

// Five 1024 x 1024 layers (20 MiB of fp32 gradients: more than one batch of kHeldGradientBatchBytes) after an
// embedding table whose row 1 is looked up twice, so its gradient is a sum of two bf16 contributions taken in fp32.
struct Net {
  std::vector<torch::Tensor> weights, biases;
  torch::Tensor table;
  tune::train::AdamW* optimizer = nullptr;

  explicit Net(uint64_t seed) {
    torch::manual_seed(seed);
    for (int i = 0; i < 5; ++i) {
      weights.push_back((torch::randn({1024, 1024}) * 0.03).requires_grad_(true));
      biases.push_back((torch::randn({1024}) * 0.1).requires_grad_(true));
    }
    table = torch::randn({4, 1024}).requires_grad_(true);
  }

  std::vector<tune::train::NamedParameter> named() const {
    std::vector<tune::train::NamedParameter> out{{"table", table}};
    for (size_t i = 0; i < weights.size(); ++i) {
      out.push_back({"w" + std::to_string(i), weights[i]});
      out.push_back({"b" + std::to_string(i), biases[i]});
    }
    return out;
  }
  std::vector<torch::Tensor> tensors() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : named()) out.push_back(p.tensor);
    return out;
  }

  void backward(const torch::Tensor& x) const {
    torch::Tensor loss;
    {
      tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
      torch::Tensor h = x + table.index_select(0, torch::tensor({1, 1, 2, 3, 0, 1, 2, 3}));
      for (size_t i = 0; i < weights.size(); ++i) h = torch::gelu(torch::linear(h, weights[i], biases[i]), "tanh");
      loss = h.to(torch::kFloat).square().mean();
    }
    loss.backward();
  }
};

}  // namespace

TEST_CASE("to_bf16_if_exact: bf16-representable values kept bit for bit, anything else refused") {
  const int64_t n = int64_t{1} << 20;  // several parallel chunks
  torch::Tensor values = torch::randn({n}).to(torch::kBFloat16);
  values[7] = 0.0;
  values[8] = -0.0;
  values[9] = std::numeric_limits<float>::infinity();
  values[10] = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor widened = values.to(torch::kFloat);
  const torch::Tensor narrowed = tune::precision::to_bf16_if_exact(widened);
  REQUIRE(narrowed.defined());
  CHECK(narrowed.scalar_type() == torch::kBFloat16);
  CHECK(bitwise_equal(narrowed, values));
  CHECK(bitwise_equal(narrowed.to(torch::kFloat), widened));

  torch::Tensor inexact = widened.clone();
  auto* words = reinterpret_cast<uint32_t*>(inexact.data_ptr<float>());
  words[n / 2 + 3] |= 1u;  // one low bit in one element, in a middle chunk
  CHECK_FALSE(tune::precision::to_bf16_if_exact(inexact).defined());
  CHECK_FALSE(tune::precision::to_bf16_if_exact(torch::tensor({1.0f + 1.0f / 1024.0f})).defined());
  CHECK_THROWS(tune::precision::to_bf16_if_exact(widened.view({1024, 1024}).t()));
  CHECK_THROWS(tune::precision::to_bf16_if_exact(values));
}

TEST_CASE("CompactGradients: weights' gradients held in bf16 with grad() freed; a sum that does not fit stays fp32") {
  Net net(3);
  CompactGradients store(net.tensors());
  net.backward(torch::randn({8, 1024}));
  int64_t expected_bytes = 0;
  for (const auto& tensor : {net.weights, net.biases}) {
    for (const auto& param : tensor) {
      CHECK_FALSE(param.grad().defined());
      CHECK(store.holds(param));
      expected_bytes += param.numel() * 2;
      // What is made is the fp32 gradient, whose low halves are zero.
      const torch::Tensor made = store.make(param);
      CHECK(made.scalar_type() == torch::kFloat);
      CHECK(bitwise_equal(made.to(torch::kBFloat16).to(torch::kFloat), made));
    }
  }
  CHECK(store.held_count() == 10);
  CHECK(store.held_bytes() == expected_bytes);
  CHECK(net.table.grad().defined());  // row 1's two contributions summed in fp32
  CHECK_FALSE(store.holds(net.table));
  store.clear();
  CHECK(store.held_count() == 0);
}

TEST_CASE("CompactGradients: AdamW's update over held gradients is the fp32 gradients' update, bit for bit") {
  const bool fused = GENERATE(true, false);
  CAPTURE(fused);
  tune::train::AdamWOptions options;
  options.kernel = fused ? tune::train::AdamWKernel::fused : tune::train::AdamWKernel::sliced;
  Net plain(11), compact(11);
  tune::train::AdamW plain_opt(tune::train::make_param_groups(plain.named(), 0.1), options);
  tune::train::AdamW compact_opt(tune::train::make_param_groups(compact.named(), 0.1), options);
  CompactGradients store(compact.tensors());
  torch::manual_seed(5);
  for (int step = 0; step < 4; ++step) {
    // Steps 1 and 3 accumulate two micro-batches: the second contribution joins the held first one in fp32.
    const int micro_batches = step % 2 == 1 ? 2 : 1;
    for (int i = 0; i < micro_batches; ++i) {
      const torch::Tensor x = torch::randn({8, 1024});
      plain.backward(x);
      compact.backward(x);
    }
    if (micro_batches == 1) CHECK(store.held_count() == 10);
    if (micro_batches == 2) CHECK(store.held_count() == 0);
    // max_norm well under the norm: the clipping coefficient multiplies every gradient.
    const auto a = tune::train::finish_step(plain.tensors(), plain_opt, nullptr, 1e-3, 1e-3, true);
    const auto b = tune::train::finish_step(compact.tensors(), compact_opt, nullptr, 1e-3, 1e-3, true, {}, &store);
    REQUIRE(a.grad_norm > 2e-3);  // clipped: the coefficient is under 1
    CHECK(a.grad_norm == b.grad_norm);
    CHECK(b.applied);
    CHECK(store.held_count() == 0);
    for (size_t k = 0; k < plain.tensors().size(); ++k) {
      INFO("step " << step << " parameter " << plain.named()[k].name);
      CHECK(bitwise_equal(plain.tensors()[k].detach(), compact.tensors()[k].detach()));
    }
  }
  const auto plain_state = plain_opt.state_tensors();
  const auto compact_state = compact_opt.state_tensors();
  for (size_t k = 0; k < plain_state.size(); ++k) CHECK(bitwise_equal(plain_state[k].second, compact_state[k].second));
}

TEST_CASE("CompactGradients: without the store (or after it is gone) gradients stay fp32 in grad()") {
  Net net(2);
  {
    CompactGradients store(net.tensors());
  }
  net.backward(torch::randn({8, 1024}));
  for (const auto& param : net.weights) CHECK(param.grad().defined());
}

TEST_CASE("finish_step: held gradients with fp16's loss scaler are refused") {
  Net net(1);
  tune::train::AdamW optimizer(tune::train::make_param_groups(net.named(), 0.0), {});
  CompactGradients store(net.tensors());
  tune::precision::DynamicLossScaler scaler;
  CHECK_THROWS_WITH(tune::train::finish_step(net.tensors(), optimizer, &scaler, 1.0, 1e-3, true, {}, &store),
                    Catch::Contains("loss scaler"));
}
