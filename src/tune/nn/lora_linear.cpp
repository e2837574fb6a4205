// LoraLinear: a bias-optional Linear whose frozen base weight can carry a trainable low-rank (LoRA) update.
#include "tune/nn/lora_linear.h"

#include <torch/nn/init.h>
#include <torch/nn/functional/dropout.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tune/core/error.h"
#include "tune/nn/nf4_linear.h"
#include "tune/nn/row_keyed_dropout.h"

#include <cmath>

namespace tune::nn {

LoraLinearImpl::LoraLinearImpl(const LoraLinearOptions& options_)
    : options(options_), dropout_stream_(next_dropout_stream()) {
  reset();
}

void LoraLinearImpl::reset() {
  TORCH_CHECK(options.lora().rank >= 0, "LoRA rank must be >= 0, got ", options.lora().rank);
  if (options.nf4_base()) {
    // Empty until set_nf4_weight: the model is built whole before its weights load, and placeholders of the packed
    // size would add the NF4 model's size again to the loading peak.
    const auto empty = [](torch::ScalarType dtype) { return torch::empty({0}, torch::TensorOptions().dtype(dtype)); };
    nf4_packed_ = register_buffer("nf4_packed", empty(torch::kUInt8));
    nf4_absmax_ = register_buffer("nf4_absmax", empty(torch::kFloat32));
    nf4_quant_map_ = register_buffer("nf4_quant_map", empty(torch::kFloat32));
    nf4_nested_absmax_ = register_buffer("nf4_nested_absmax", empty(torch::kFloat32));
    nf4_nested_quant_map_ = register_buffer("nf4_nested_quant_map", empty(torch::kFloat32));
  } else {
    weight = register_parameter("weight", torch::empty({options.out_features(), options.in_features()}));
  }
  if (options.bias()) {
    bias = register_parameter("bias", torch::empty({options.out_features()}));
  } else {
    bias = torch::Tensor();
  }
  {
    // Same initialisation as torch.nn.Linear, so a model built without a checkpoint behaves like PyTorch's.
    torch::NoGradGuard no_grad;
    if (weight.defined()) torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
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

namespace {
thread_local bool adapters_off = false;
}  // namespace

LoraAdaptersOff::LoraAdaptersOff() : was_active_(adapters_off) { adapters_off = true; }
LoraAdaptersOff::~LoraAdaptersOff() { adapters_off = was_active_; }
bool LoraAdaptersOff::active() { return adapters_off; }

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& input) {
  torch::Tensor output;
  if (nf4_base()) {
    output = nf4_linear(input, nf4_weight());
    // The bias in the product's dtype, as torch::linear under autocast would cast it.
    if (bias.defined()) output = output + bias.to(output.scalar_type());
  } else {
    output = torch::linear(input, weight, bias);
  }
  if (!has_lora() || adapters_off) return output;
  // Dropout on the adapter's input only (PEFT): the base path sees the undropped input.
  const double p = options.lora().dropout;
  // Per global row when the recipe keys the step's rows (nn/row_keyed_dropout.h), so N processes draw what one would.
  const torch::Tensor adapter_input = row_keyed_dropout(input, p, is_training(), dropout_stream_);
  return output + lora_B(lora_A(adapter_input)) * lora_scaling();
}

torch::Tensor LoraLinearImpl::merged_weight() const {
  torch::NoGradGuard no_grad;
  if (!has_lora()) return base_weight().clone();
  // Computed in fp32 (or wider) whatever the storage dtype, so merging does not add a rounding step of its own.
  const auto stored_dtype = nf4_base() ? nf4_dtype_ : weight.scalar_type();
  const auto compute_dtype = torch::promote_types(stored_dtype, torch::kFloat32);
  const torch::Tensor base =
      nf4_base() ? precision::dequantize_nf4_on_device(nf4_weight(), compute_dtype) : weight.to(compute_dtype);
  const torch::Tensor delta = torch::matmul(lora_B->weight.to(compute_dtype), lora_A->weight.to(compute_dtype));
  return (base + delta * lora_scaling()).to(stored_dtype);
}

torch::Tensor LoraLinearImpl::base_weight() const {
  torch::NoGradGuard no_grad;
  if (!nf4_base()) return weight.detach();
  return precision::dequantize_nf4_on_device(nf4_weight(), nf4_dtype_);
}

void LoraLinearImpl::set_nf4_weight(const precision::Nf4Tensor& nf4) {
  const std::vector<int64_t> expected = {options.out_features(), options.in_features()};
  if (!nf4_base()) throw Error("set_nf4_weight: this Linear layer was built without nf4_base");
  if (nf4.shape != expected) {
    throw Error(fmt::format("set_nf4_weight: the NF4 weight has shape [{}], the layer expects [{}]",
                            fmt::join(nf4.shape, ", "), fmt::join(expected, ", ")));
  }
  const torch::Device device = nf4_packed_.device();
  nf4_packed_.set_data(nf4.packed.reshape(-1).to(device));
  nf4_absmax_.set_data(nf4.absmax.to(device));
  nf4_quant_map_.set_data(nf4.code.to(device));
  const auto none = torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  nf4_nested_absmax_.set_data(nf4.double_quantized() ? nf4.nested_absmax.to(device) : none);
  nf4_nested_quant_map_.set_data(nf4.double_quantized() ? nf4.nested_code.to(device) : none.clone());
  nf4_blocksize_ = nf4.blocksize;
  nf4_nested_blocksize_ = nf4.nested_blocksize;
  nf4_offset_ = nf4.offset;
  nf4_dtype_ = nf4.dtype;
  nf4_loaded_ = true;
}

int64_t store_frozen_parameters_in_bf16(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  int64_t in_bf16 = 0;
  for (auto& param : module.parameters()) {
    if (param.requires_grad()) continue;
    if (param.scalar_type() != torch::kBFloat16) param.set_data(param.to(torch::kBFloat16));
    ++in_bf16;
  }
  return in_bf16;
}

precision::Nf4Tensor LoraLinearImpl::nf4_weight() const {
  if (!nf4_loaded_) {
    throw Error(fmt::format("an NF4 Linear layer [{} -> {}] was used before its weight was loaded or quantised",
                            options.in_features(), options.out_features()));
  }
  precision::Nf4Tensor nf4;
  nf4.packed = nf4_packed_;
  nf4.blocksize = nf4_blocksize_;
  nf4.absmax = nf4_absmax_;
  nf4.code = nf4_quant_map_;
  if (nf4_nested_absmax_.numel() > 0) {
    nf4.nested_absmax = nf4_nested_absmax_;
    nf4.nested_code = nf4_nested_quant_map_;
  }
  nf4.nested_blocksize = nf4_nested_blocksize_;
  nf4.offset = nf4_offset_;
  nf4.shape = {options.out_features(), options.in_features()};
  nf4.dtype = nf4_dtype_;
  return nf4;
}

}  // namespace tune::nn
