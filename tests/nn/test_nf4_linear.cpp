// The NF4 base of QLoRA (nn/nf4_linear, LoraLinear with nf4_base): forward and the input and LoRA gradients against
// dequantise-then-linear in float64 (the weight dequantised by the CPU codec, precision::dequantize_nf4, which is
// checked bit for bit against bitsandbytes in tests/precision/test_nf4.cpp); no weight gradient; the device path of
// dequantisation equal to the codec's; bf16 autocast dequantising to bf16.
#include <catch2/catch.hpp>

#include <algorithm>
#include <torch/torch.h>

#include <set>
#include <string>

#include "tune/compat/torch_compat.h"
#include "tune/nn/lora_linear.h"
#include "tune/nn/nf4_linear.h"
#include "common/scoped_env.h"
#include "tune/precision/nf4.h"
#include "tune/precision/nf4_cpu_product.h"
#include "tune/precision/nf4_cuda_kernel.h"

using namespace tune;

namespace {

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The largest difference relative to the reference's largest magnitude: fp32 sums of a few dozen terms against
// float64 differ by a few 1e-7 of their scale, whatever the CPU's GEMM kernels (an absolute bound was 1.01e-5 over
// 1e-5 on an AMD EPYC's, for a gradient of magnitude ~20).
double max_relative_diff(const torch::Tensor& a, const torch::Tensor& reference) {
  return max_diff(a, reference) / std::max(1e-12, reference.abs().max().item<double>());
}

// A layer of odd sizes (the last block partial, an odd element count padded) with an NF4 base and a LoRA adapter
// whose B is not zero, so both paths carry gradient.
nn::LoraLinear make_layer(bool bias, const precision::Nf4Tensor& weight) {
  nn::LoraOptions lora;
  lora.rank = 3;
  lora.alpha = 6.0;
  nn::LoraLinear layer(nn::LoraLinearOptions(weight.shape[1], weight.shape[0]).bias(bias).lora(lora).nf4_base(true));
  layer->set_nf4_weight(weight);
  torch::NoGradGuard no_grad;
  layer->lora_B->weight.normal_(0.0, 0.5);
  return layer;
}

}  // namespace

TEST_CASE("dequantize_nf4_on_device equals the CPU codec bit for bit", "[nn][nf4]") {
  torch::manual_seed(1);
  for (const bool double_quant : {false, true}) {
    for (const auto& shape : {std::vector<int64_t>{37, 70}, std::vector<int64_t>{5, 3}, std::vector<int64_t>{64, 512}}) {
      const auto weight = precision::quantize_nf4(torch::randn(shape) * 0.1, 64, double_quant);
      for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf}) {
        INFO("double_quant " << double_quant << ", shape " << shape[0] << "x" << shape[1] << ", " << dtype);
        CHECK(torch::equal(precision::dequantize_nf4_on_device(weight, dtype), precision::dequantize_nf4(weight, dtype)));
      }
    }
  }
}

TEST_CASE("an NF4 LoRA layer's output and gradients equal dequantise-then-linear in float64", "[nn][nf4]") {
  torch::manual_seed(2);
  for (const bool double_quant : {false, true}) {
    for (const bool bias : {false, true}) {
      INFO("double_quant " << double_quant << ", bias " << bias);
      const auto weight = precision::quantize_nf4(torch::randn({37, 70}) * 0.05, 64, double_quant);
      auto layer = make_layer(bias, weight);
      if (bias) {
        torch::NoGradGuard no_grad;
        layer->bias.normal_();
        layer->bias.set_requires_grad(false);  // frozen, as under LoRA
      }
      const auto x = torch::randn({2, 3, 70}).requires_grad_(true);
      const auto upstream = torch::randn({2, 3, 37});
      const auto y = layer(x);
      (y * upstream).sum().backward();

      // The reference: the codec's dequantised weight, every product in float64, gradients by autograd in float64.
      const auto w64 = precision::dequantize_nf4(weight, torch::kFloat32).to(torch::kDouble);
      const auto x64 = x.detach().to(torch::kDouble).requires_grad_(true);
      const auto a64 = layer->lora_A->weight.detach().to(torch::kDouble).requires_grad_(true);
      const auto b64 = layer->lora_B->weight.detach().to(torch::kDouble).requires_grad_(true);
      auto y64 = x64.matmul(w64.t()) + x64.matmul(a64.t()).matmul(b64.t()) * layer->lora_scaling();
      if (bias) y64 = y64 + layer->bias.detach().to(torch::kDouble);
      (y64 * upstream.to(torch::kDouble)).sum().backward();

      CHECK(max_relative_diff(y, y64) < 2e-6);
      CHECK(max_relative_diff(x.grad(), x64.grad()) < 2e-6);
      CHECK(max_relative_diff(layer->lora_A->weight.grad(), a64.grad()) < 2e-6);
      CHECK(max_relative_diff(layer->lora_B->weight.grad(), b64.grad()) < 2e-6);
    }
  }
}

TEST_CASE("an NF4 base has no weight parameter and gets no gradient", "[nn][nf4]") {
  torch::manual_seed(3);
  const auto weight = precision::quantize_nf4(torch::randn({8, 16}), 64, true);
  auto layer = make_layer(false, weight);
  std::set<std::string> parameters, buffers;
  for (const auto& item : layer->named_parameters()) parameters.insert(item.key());
  for (const auto& item : layer->named_buffers()) buffers.insert(item.key());
  CHECK(parameters == std::set<std::string>{"lora_A.weight", "lora_B.weight"});
  CHECK(buffers == std::set<std::string>{"nf4_packed", "nf4_absmax", "nf4_quant_map", "nf4_nested_absmax",
                                         "nf4_nested_quant_map"});
  const auto x = torch::randn({4, 16}).requires_grad_(true);
  layer(x).sum().backward();
  for (const auto& item : layer->named_buffers()) {
    INFO(item.key());
    CHECK_FALSE(item.value().requires_grad());
    CHECK_FALSE(item.value().grad().defined());
  }
  // The stored fields are the quantised ones, unchanged by use.
  CHECK(torch::equal(layer->nf4_weight().packed, weight.packed));
  CHECK(torch::equal(layer->base_weight(), precision::dequantize_nf4(weight)));
  // The input gradient alone (the LoRA path off): grad W, from the dequantised weight.
  nn::LoraLinear frozen(nn::LoraLinearOptions(16, 8).nf4_base(true));
  frozen->set_nf4_weight(weight);
  const auto z = torch::randn({4, 16}, torch::kDouble).to(torch::kFloat32).requires_grad_(true);
  const auto g = torch::randn({4, 8});
  const auto grad = torch::autograd::grad({frozen(z)}, {z}, {g})[0];
  const auto expected = g.to(torch::kDouble).matmul(precision::dequantize_nf4(weight, torch::kFloat32).to(torch::kDouble));
  CHECK(max_diff(grad, expected) < 1e-5);
}

TEST_CASE("under bf16 autocast the NF4 weight is dequantised to bf16 and the input gradient keeps its dtype",
          "[nn][nf4]") {
  torch::manual_seed(4);
  const auto weight = precision::quantize_nf4(torch::randn({24, 40}) * 0.1, 64, true);
  const auto x = torch::randn({5, 40}).requires_grad_(true);
  torch::Tensor y;
  {
    const bool was_enabled = compat::autocast_cpu_enabled();
    const auto was_dtype = compat::autocast_cpu_dtype();
    compat::set_autocast_cpu_enabled(true);
    compat::set_autocast_cpu_dtype(torch::kBFloat16);
    y = nn::nf4_linear(x, weight);
    compat::set_autocast_cpu_enabled(was_enabled);
    compat::set_autocast_cpu_dtype(was_dtype);
  }
  CHECK(y.scalar_type() == torch::kBFloat16);
  // The product of bf16 operands: the bf16 input times the bf16-rounded dequantised weight.
  const auto expected = x.detach().to(torch::kBFloat16).to(torch::kDouble).matmul(
      precision::dequantize_nf4(weight, torch::kBFloat16).to(torch::kDouble).t());
  CHECK(max_diff(y, expected) < 2e-2 * expected.abs().max().item<double>());
  y.sum().backward();
  CHECK(x.grad().scalar_type() == torch::kFloat32);
  const auto grad_expected = torch::ones({5, 24}, torch::kDouble).matmul(
      precision::dequantize_nf4(weight, torch::kBFloat16).to(torch::kDouble));
  CHECK(max_diff(x.grad(), grad_expected) < 2e-2 * grad_expected.abs().max().item<double>());
}

TEST_CASE("the CPU's sliced fp32 product equals dequantise-then-multiply (fp32-accumulate numerics)", "[nn][nf4]") {
  // Odd widths (rows starting in a byte's low nibble), partial blocks, weights of several slices, both quantisations;
  // bf16 operands through tune's fp32-accumulate kernel, and fp32.
  torch::manual_seed(6);
  const tune::testing::ScopedEnv gemm("TUNE_CPU_GEMM", "fp32");
  for (const auto& shape : {std::vector<int64_t>{37, 71}, std::vector<int64_t>{3000, 1024}, std::vector<int64_t>{9, 64}}) {
    for (const bool double_quant : {false, true}) {
      const auto weight = precision::quantize_nf4(torch::randn(shape) * 0.1, 64, double_quant);
      for (const auto dtype : {torch::kBFloat16, torch::kFloat32}) {
        INFO("shape " << shape[0] << "x" << shape[1] << ", double_quant " << double_quant << ", " << dtype);
        const auto x = (torch::randn({70, shape[1]}) * 0.5).to(dtype);
        const auto grad = torch::randn({70, shape[0]}).to(dtype);
        const auto dequantised = precision::dequantize_nf4(weight, weight.dtype).to(dtype);  // as nf4_linear's
        const auto y = precision::nf4_cpu_linear(x, weight);
        const auto gx = precision::nf4_cpu_linear_input_grad(grad, weight);
        CHECK(y.scalar_type() == dtype);
        CHECK(gx.scalar_type() == dtype);
        // fp32 sums in another order (slices of the output; of the inner dimension in the gradient): equal up to
        // the last bits before the final rounding.
        const double tolerance = dtype == torch::kBFloat16 ? 1e-2 : 1e-5;
        const auto y_expected = torch::matmul(x, dequantised.t());
        const auto gx_expected = torch::matmul(grad, dequantised);
        CHECK(max_diff(y, y_expected) <= tolerance * y_expected.abs().max().item<double>());
        CHECK(max_diff(gx, gx_expected) <= tolerance * gx_expected.abs().max().item<double>());
      }
    }
  }
  // nf4_linear takes it (TUNE_NF4_CPU=fused) or dequantises (=dequantize): the same outputs and input gradients.
  const auto weight = precision::quantize_nf4(torch::randn({48, 96}) * 0.1, 64, true);
  std::vector<torch::Tensor> outputs, grads;
  for (const char* path : {"fused", "dequantize"}) {
    const tune::testing::ScopedEnv choice("TUNE_NF4_CPU", path);
    const auto x = torch::linspace(-1.0, 1.0, 2 * 3 * 96).view({2, 3, 96}).requires_grad_(true);
    const auto y = nn::nf4_linear(x, weight);
    (y * torch::linspace(0.0, 1.0, 48)).sum().backward();
    outputs.push_back(y.detach());
    grads.push_back(x.grad());
  }
  CHECK(outputs[0].sizes() == outputs[1].sizes());
  CHECK(max_diff(outputs[0], outputs[1]) <= 1e-5 * outputs[1].abs().max().item<double>());
  CHECK(max_diff(grads[0], grads[1]) <= 1e-5 * grads[1].abs().max().item<double>());
}

TEST_CASE("on CUDA, the NF4 layer dequantises on the GPU to the codec's values and matches float64", "[nn][nf4][cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: the CUDA case is not exercised");
    return;
  }
  torch::manual_seed(3);
  const torch::Device cuda(torch::kCUDA, 0);
  const auto weight = precision::quantize_nf4(torch::randn({96, 200}) * 0.05, 64, /*double_quant=*/true);
  auto layer = make_layer(/*bias=*/false, weight);
  layer->to(cuda);
  // The buffers moved with the module, and the GPU's dequantisation is the codec's, bit for bit.
  // The operator chain (the default) and the opt-in jiterator kernel, which ran (not a silent fallback), for each
  // output dtype.
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    const auto by_chain = precision::dequantize_nf4_on_device(layer->nf4_weight(), dtype);
    CHECK_FALSE(precision::nf4_cuda_kernel_ran());
    CHECK(by_chain.device().is_cuda());
    CHECK(torch::equal(by_chain.cpu(), precision::dequantize_nf4(weight, dtype)));
    const tune::testing::ScopedEnv jit("TUNE_NF4_KERNEL", "jit");
    const auto by_kernel = precision::dequantize_nf4_on_device(layer->nf4_weight(), dtype);
    CHECK(precision::nf4_cuda_kernel_ran());
    CHECK(torch::equal(by_kernel.cpu(), precision::dequantize_nf4(weight, dtype)));
  }
  // A real projection's size (many blocks, every nibble and absmax pattern), bit for bit.
  const auto large = precision::quantize_nf4(torch::randn({2048, 512}, torch::kBFloat16) * 0.02, 64, true);
  precision::Nf4Tensor large_gpu = large;
  for (torch::Tensor* field : {&large_gpu.packed, &large_gpu.absmax, &large_gpu.code, &large_gpu.nested_absmax,
                               &large_gpu.nested_code}) {
    *field = field->to(cuda);
  }
  CHECK(torch::equal(precision::dequantize_nf4_on_device(large_gpu, torch::kBFloat16).cpu(),
                     precision::dequantize_nf4(large, torch::kBFloat16)));
  {
    const tune::testing::ScopedEnv jit("TUNE_NF4_KERNEL", "jit");
    CHECK(torch::equal(precision::dequantize_nf4_on_device(large_gpu, torch::kBFloat16).cpu(),
                       precision::dequantize_nf4(large, torch::kBFloat16)));
    CHECK(precision::nf4_cuda_kernel_ran());
  }
  const auto x = torch::randn({4, 200}, torch::TensorOptions().device(cuda)).requires_grad_(true);
  const auto upstream = torch::randn({4, 96}, torch::TensorOptions().device(cuda));
  (layer(x) * upstream).sum().backward();
  const auto w64 = precision::dequantize_nf4(weight, torch::kFloat32).to(torch::kDouble);
  const auto x64 = x.detach().cpu().to(torch::kDouble).requires_grad_(true);
  const auto a64 = layer->lora_A->weight.detach().cpu().to(torch::kDouble).requires_grad_(true);
  const auto b64 = layer->lora_B->weight.detach().cpu().to(torch::kDouble).requires_grad_(true);
  const auto y64 = x64.matmul(w64.t()) + x64.matmul(a64.t()).matmul(b64.t()) * layer->lora_scaling();
  (y64 * upstream.cpu().to(torch::kDouble)).sum().backward();
  // TF32 may be on for CUDA matmuls: a looser bound than the CPU case's.
  CHECK(max_diff(x.grad().cpu(), x64.grad()) < 5e-3);
  CHECK(max_diff(layer->lora_B->weight.grad().cpu(), b64.grad()) < 5e-3);
}
