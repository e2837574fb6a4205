// A Linear layer with an optional LoRA adapter: y = x W^T + b + (alpha / rank) * dropout(x) A^T B^T.
// Parameter names follow Hugging Face / PEFT: "weight", "bias", "lora_A.weight", "lora_B.weight", so a
// model's named_parameters() are the names in HF checkpoints and (with "base_model.model." prepended) in PEFT
// adapter files. With nf4_base (QLoRA) W is a frozen NF4 weight instead of a parameter: buffers named nf4_* (so
// module->to(device) moves them and no HF name is taken), filled by set_nf4_weight, applied through nn::nf4_linear.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "tune/precision/nf4.h"

namespace tune::nn {

struct LoraOptions {
  int64_t rank = 0;       // 0: no adapter
  double alpha = 16.0;    // scaling = alpha / rank, as PEFT's default (not rsLoRA)
  double dropout = 0.0;   // on the adapter's input only
};

struct LoraLinearOptions {
  LoraLinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = false;
  TORCH_ARG(LoraOptions, lora) = {};
  // The base weight is NF4 (frozen, no "weight" parameter): QLoRA's base layers and pre-quantised checkpoints.
  TORCH_ARG(bool, nf4_base) = false;
};

// While one lives on this thread, every LoraLinear computes its base product only (adapters switched off): the
// reference model of LoRA preference training (DPO) is the policy's own base, with no second copy of the weights.
// Meant for no-grad forwards (a backward's recompute on another thread would not see it).
class LoraAdaptersOff {
 public:
  LoraAdaptersOff();
  ~LoraAdaptersOff();
  LoraAdaptersOff(const LoraAdaptersOff&) = delete;
  LoraAdaptersOff& operator=(const LoraAdaptersOff&) = delete;
  static bool active();

 private:
  bool was_active_;
};

// param_dtype: bf16 — stores every frozen (requires_grad false) parameter of `module` in bf16, halving a LoRA base's
// memory; under bf16 (or fp16) autocast the products read it as they would have read the fp32 weight's cast copy.
// Returns the number of frozen parameters now stored in bf16.
int64_t store_frozen_parameters_in_bf16(torch::nn::Module& module);

class LoraLinearImpl : public torch::nn::Module {
 public:
  explicit LoraLinearImpl(const LoraLinearOptions& options);
  void reset();  // weight: kaiming-uniform as torch.nn.Linear; lora_A kaiming-uniform(a=sqrt 5), lora_B zeros (PEFT)
  torch::Tensor forward(const torch::Tensor& input);

  bool has_lora() const { return options.lora().rank > 0; }
  double lora_scaling() const { return options.lora().alpha / static_cast<double>(options.lora().rank); }
  // W + scaling * B A, for export --merge-lora (an NF4 base dequantised first, in fp32, and the result in the NF4
  // weight's original dtype). Returns a new tensor; the module is unchanged.
  torch::Tensor merged_weight() const;

  bool nf4_base() const { return options.nf4_base(); }
  // Stores `weight` (shape [out, in]) in the nf4_* buffers, on the buffers' current device. Throws tune::Error for a
  // layer without nf4_base or a weight of another shape.
  void set_nf4_weight(const precision::Nf4Tensor& weight);
  // The NF4 weight's fields (the buffers themselves, on their device). Throws tune::Error before set_nf4_weight.
  precision::Nf4Tensor nf4_weight() const;
  bool nf4_weight_loaded() const { return nf4_loaded_; }
  // The base weight as a dense tensor: `weight` (detached), or the NF4 weight dequantised to its original dtype.
  torch::Tensor base_weight() const;

  LoraLinearOptions options;
  torch::Tensor weight;
  torch::Tensor bias;
  torch::nn::Linear lora_A{nullptr};
  torch::nn::Linear lora_B{nullptr};

 private:
  uint64_t dropout_stream_;  // this layer's stream of row-keyed dropout masks
  // nf4_base: the Nf4Tensor's tensors as buffers (nested ones empty without double quantisation) and its scalars.
  torch::Tensor nf4_packed_, nf4_absmax_, nf4_quant_map_, nf4_nested_absmax_, nf4_nested_quant_map_;
  int64_t nf4_blocksize_ = 64;
  int64_t nf4_nested_blocksize_ = precision::kNf4NestedBlockSize;
  float nf4_offset_ = 0.0f;
  torch::ScalarType nf4_dtype_ = torch::kBFloat16;
  bool nf4_loaded_ = false;
};
TORCH_MODULE(LoraLinear);

}  // namespace tune::nn
