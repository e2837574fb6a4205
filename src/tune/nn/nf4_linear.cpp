// nf4_linear as a custom autograd Function: saving the dequantised weight would keep 2 (bf16) or 4 (fp32) bytes per
// base parameter alive per layer until backward, which is the memory QLoRA exists to save.
#include "tune/nn/nf4_linear.h"

#include <torch/autograd.h>

#include <vector>

#include "tune/compat/torch_compat.h"
#include "tune/core/cpu_gemm_mode.h"
#include "tune/precision/nf4_cpu_product.h"

namespace tune::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::ScalarType compute_dtype_for(const torch::Tensor& input) {
  if (input.device().is_cuda() && compat::autocast_cuda_enabled()) return compat::autocast_cuda_dtype();
  if (input.device().is_cpu() && compat::autocast_cpu_enabled()) return compat::autocast_cpu_dtype();
  return input.scalar_type();
}

// The weight's fields travel in the context by reference (IValues of the module's own buffers), not as copies.
void save_weight(AutogradContext* ctx, const precision::Nf4Tensor& weight) {
  auto& saved = ctx->saved_data;
  saved["packed"] = weight.packed;
  saved["absmax"] = weight.absmax;
  saved["code"] = weight.code;
  saved["nested_absmax"] = weight.nested_absmax.defined() ? weight.nested_absmax : torch::Tensor();
  saved["nested_code"] = weight.nested_code.defined() ? weight.nested_code : torch::Tensor();
  saved["blocksize"] = weight.blocksize;
  saved["nested_blocksize"] = weight.nested_blocksize;
  saved["offset"] = static_cast<double>(weight.offset);
  saved["shape"] = weight.shape;
  saved["dtype"] = static_cast<int64_t>(weight.dtype);
}

precision::Nf4Tensor restore_weight(AutogradContext* ctx) {
  auto& saved = ctx->saved_data;
  precision::Nf4Tensor weight;
  weight.packed = saved["packed"].toTensor();
  weight.absmax = saved["absmax"].toTensor();
  weight.code = saved["code"].toTensor();
  if (!saved["nested_absmax"].isNone()) {
    const torch::Tensor nested_absmax = saved["nested_absmax"].toTensor();
    if (nested_absmax.defined()) {
      weight.nested_absmax = nested_absmax;
      weight.nested_code = saved["nested_code"].toTensor();
    }
  }
  weight.blocksize = saved["blocksize"].toInt();
  weight.nested_blocksize = saved["nested_blocksize"].toInt();
  weight.offset = static_cast<float>(saved["offset"].toDouble());
  weight.shape = saved["shape"].toIntVector();
  weight.dtype = static_cast<torch::ScalarType>(saved["dtype"].toInt());
  return weight;
}

// The weight as bitsandbytes' 4-bit forward (0.50: MatMul4Bit -> its gemm_4bit op) multiplies it: code * absmax
// rounded once, straight to the compute dtype. Not through the dtype the weight was quantised from, as the public
// dequantize_4bit returns it: for a bf16-origin model computed in fp32 that extra rounding moved transformers'
// logits by ~8e-4. (bitsandbytes' backward does round through that dtype; tune's uses the forward's weight, the
// gradient of the function it computed. In bf16 compute the two are the same values.)
torch::Tensor dequantise_for(const precision::Nf4Tensor& weight, torch::ScalarType compute) {
  return precision::dequantize_nf4_on_device(weight, compute);
}

// Whether a CPU product takes precision/nf4_cpu_product.h (the weight dequantised a slice at a time into fp32 for
// sgemm) rather than dequantise-then-multiply: the process's choice (core/cpu_gemm_mode.h: TUNE_NF4_CPU, else what
// the run measured faster on its NF4 weights, else dequantise).
bool fused_cpu_product(const torch::Tensor& operand) { return operand.device().is_cpu() && nf4_cpu_fused_product(); }

// [..., width] as [rows, width], and back.
torch::Tensor as_matrix(const torch::Tensor& tensor) { return tensor.reshape({-1, tensor.size(-1)}); }
torch::Tensor like_batch(const torch::Tensor& matrix, const torch::Tensor& batch) {
  std::vector<int64_t> sizes(batch.sizes().begin(), batch.sizes().end());
  sizes.back() = matrix.size(1);
  return matrix.view(sizes);
}

class Nf4LinearFunction : public torch::autograd::Function<Nf4LinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const precision::Nf4Tensor& weight) {
    const torch::ScalarType compute = compute_dtype_for(input);
    save_weight(ctx, weight);
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
    if (fused_cpu_product(input)) {
      const torch::Tensor x = input.to(compute);
      return like_batch(precision::nf4_cpu_linear(as_matrix(x), weight), x);
    }
    // The temporary dies with this scope; only the product is returned.
    const torch::Tensor dequantised = dequantise_for(weight, compute);
    return torch::linear(input.to(compute), dequantised);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor& grad_output = grad_outputs[0];
    const auto input_dtype = static_cast<torch::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    const precision::Nf4Tensor weight = restore_weight(ctx);
    // d(x W^T)/dx = grad W; the weight's own gradient is not computed (frozen), so neither is the input saved.
    if (fused_cpu_product(grad_output)) {
      const torch::Tensor grad = precision::nf4_cpu_linear_input_grad(as_matrix(grad_output), weight);
      return {like_batch(grad, grad_output).to(input_dtype), torch::Tensor()};
    }
    const torch::Tensor dequantised = dequantise_for(weight, grad_output.scalar_type());
    return {torch::matmul(grad_output, dequantised).to(input_dtype), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor nf4_linear(const torch::Tensor& input, const precision::Nf4Tensor& weight) {
  return Nf4LinearFunction::apply(input, weight);
}

}  // namespace tune::nn
