// LoraLinear: a bias-optional Linear whose frozen base weight can carry a trainable low-rank (LoRA) update.
#include "tune/nn/lora_linear.h"

#include <torch/nn/init.h>
#include <torch/nn/functional/dropout.h>

#include "tune/nn/row_keyed_dropout.h"

#include <cmath>

namespace tune::nn {

LoraLinearImpl::LoraLinearImpl(const LoraLinearOptions& options_)
    : options(options_), dropout_stream_(next_dropout_stream()) {
  reset();
}

void LoraLinearImpl::reset() {
  TORCH_CHECK(options.lora().rank >= 0, "LoRA rank must be >= 0, got ", options.lora().rank);
  weight = register_parameter("weight", torch::empty({options.out_features(), options.in_features()}));
  if (options.bias()) {
    bias = register_parameter("bias", torch::empty({options.out_features()}));
  } else {
    bias = torch::Tensor();
  }
  {
    // Same initialisation as torch.nn.Linear, so a model built without a checkpoint behaves like PyTorch's.
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
    if (bias.defined()) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(options.in_features()));
      bias.uniform_(-bound, bound);
    }
  }
  if (has_lora()) {
    const int64_t rank = options.lora().rank;
    // torch::nn::Linear's own init is kaiming-uniform(a=sqrt 5), which is PEFT's lora_A init.
    lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(options.in_features(), rank).bias(false)));
    lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(rank, options.out_features()).bias(false)));
    // B = 0 makes the adapted layer start exactly at the base layer.
    torch::NoGradGuard no_grad;
    lora_B->weight.zero_();
  }
}

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& input) {
  torch::Tensor output = torch::linear(input, weight, bias);
  if (!has_lora()) return output;
  // Dropout on the adapter's input only (PEFT): the base path sees the undropped input.
  const double p = options.lora().dropout;
  // Per global row when the recipe keys the step's rows (nn/row_keyed_dropout.h), so N processes draw what one would.
  const torch::Tensor adapter_input = row_keyed_dropout(input, p, is_training(), dropout_stream_);
  return output + lora_B(lora_A(adapter_input)) * lora_scaling();
}

torch::Tensor LoraLinearImpl::merged_weight() const {
  torch::NoGradGuard no_grad;
  if (!has_lora()) return weight.detach().clone();
  // Computed in fp32 (or wider) whatever the storage dtype, so merging does not add a rounding step of its own.
  const auto compute_dtype = torch::promote_types(weight.scalar_type(), torch::kFloat32);
  const torch::Tensor delta = torch::matmul(lora_B->weight.to(compute_dtype), lora_A->weight.to(compute_dtype));
  return (weight.to(compute_dtype) + delta * lora_scaling()).to(weight.scalar_type());
}

}  // namespace tune::nn
