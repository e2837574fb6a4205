// A Linear layer with an optional LoRA adapter: y = x W^T + b + (alpha / rank) * dropout(x) A^T B^T.
// Parameter names follow Hugging Face / PEFT: "weight", "bias", "lora_A.weight", "lora_B.weight", so a
// model's named_parameters() are the names in HF checkpoints and (with "base_model.model." prepended) in PEFT
// adapter files.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

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
};

class LoraLinearImpl : public torch::nn::Module {
 public:
  explicit LoraLinearImpl(const LoraLinearOptions& options);
  void reset();  // weight: kaiming-uniform as torch.nn.Linear; lora_A kaiming-uniform(a=sqrt 5), lora_B zeros (PEFT)
  torch::Tensor forward(const torch::Tensor& input);

  bool has_lora() const { return options.lora().rank > 0; }
  double lora_scaling() const { return options.lora().alpha / static_cast<double>(options.lora().rank); }
  // W + scaling * B A, for export --merge-lora. Returns a new tensor; the module is unchanged.
  torch::Tensor merged_weight() const;

  LoraLinearOptions options;
  torch::Tensor weight;
  torch::Tensor bias;
  torch::nn::Linear lora_A{nullptr};
  torch::nn::Linear lora_B{nullptr};

 private:
  uint64_t dropout_stream_;  // this layer's stream of row-keyed dropout masks
};
TORCH_MODULE(LoraLinear);

}  // namespace tune::nn
