// diffusers' shared transformer layers, written from its semantics (models/attention_processor.py: Attention,
// AttnProcessor2_0, SanaLinearAttnProcessor2_0; normalization.py; embeddings.py) on tune's shared pieces.
#include "tune/models/diffusers_layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tune/nn/attention_core.h"
#include "tune/nn/linear.h"
#include "tune/nn/linear_attention.h"
#include "tune/nn/gelu_tanh.h"

namespace tune::models {

namespace {

// diffusers' Attention builds its qk norms with eps 1e-5; SanaLinearAttnProcessor2_0 divides by (norm + 1e-15).
constexpr double kQkNormEps = 1e-5;
constexpr double kLinearAttentionEps = 1e-15;

torch::nn::Linear make_linear(int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out)); }

}  // namespace

std::shared_ptr<torch::nn::Module> parameter_free_holder() { return std::make_shared<torch::nn::Module>(); }

std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> trainable;
  for (const auto& parameter : module.parameters()) {
    if (parameter.requires_grad()) trainable.push_back(parameter);
  }
  return trainable;
}

void init_linears_xavier(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (item.key().find("lora_") != std::string::npos) continue;
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(item.value().get())) {
      torch::nn::init::xavier_uniform_(linear->weight);
      if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
    } else if (auto* projection = dynamic_cast<nn::LoraLinearImpl*>(item.value().get())) {
      torch::nn::init::xavier_uniform_(projection->weight);
      if (projection->bias.defined()) torch::nn::init::zeros_(projection->bias);
    }
  }
}

void check_caption_inputs(const char* model, int64_t batch, int64_t caption_channels, const torch::Tensor& text,
                          const torch::Tensor& text_mask) {
  if (text.dim() != 3 || text.size(0) != batch || text.size(1) < 1 || text.size(2) != caption_channels) {
    throw std::invalid_argument(fmt::format("{}: text must be [{}, length, {}] (batch, tokens, caption_channels), "
                                            "got [{}]", model, batch, caption_channels, fmt::join(text.sizes(), ", ")));
  }
  if (text_mask.defined() && (text_mask.dim() != 2 || text_mask.size(0) != batch || text_mask.size(1) != text.size(1))) {
    throw std::invalid_argument(fmt::format("{}: text_mask must be [{}, {}] (batch, tokens), got [{}]", model, batch,
                                            text.size(1), fmt::join(text_mask.sizes(), ", ")));
  }
}

bool DiffusersLora::adapts(const std::string& name) const {
  return options.rank > 0 && std::find(targets.begin(), targets.end(), name) != targets.end();
}

nn::LoraLinearOptions DiffusersLora::layer(int64_t in, int64_t out, bool bias, const std::string& name) const {
  nn::LoraLinearOptions layer_options(in, out);
  layer_options.bias(bias);
  if (adapts(name)) layer_options.lora(options);
  return layer_options;
}

DiffusersAttentionImpl::DiffusersAttentionImpl(const DiffusersAttentionOptions& options_, const DiffusersLora& lora)
    : options(options_) {
  const int64_t inner = options.inner_dim();
  to_q = register_module("to_q", nn::LoraLinear(lora.layer(options.query_dim(), inner, options.qkv_bias(), "to_q")));
  to_k = register_module("to_k", nn::LoraLinear(lora.layer(options.context_dim(), inner, options.qkv_bias(), "to_k")));
  to_v = register_module("to_v", nn::LoraLinear(lora.layer(options.context_dim(), inner, options.qkv_bias(), "to_v")));
  if (options.qk_norm()) {
    norm_q = register_module("norm_q", nn::RMSNorm(nn::RMSNormOptions(inner).eps(kQkNormEps)));
    norm_k = register_module("norm_k", nn::RMSNorm(nn::RMSNormOptions(inner).eps(kQkNormEps)));
  }
  output = nn::LoraLinear(lora.layer(inner, options.query_dim(), true, "to_out.0"));
  auto to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(output);
}

torch::Tensor DiffusersAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                              const torch::Tensor& mask, nn::BlockRunner* runner) {
  const int64_t rows = x.size(0);
  const int64_t length = x.size(1);
  const int64_t heads = options.heads(), head_dim = options.head_dim();
  torch::Tensor query = to_q->forward(x);
  torch::Tensor key = to_k->forward(context);
  const torch::Tensor value = to_v->forward(context);
  if (options.qk_norm()) {
    query = norm_q->forward(query);
    key = norm_k->forward(key);
  }
  // [N, T, heads * head_dim] -> [N, heads, T, head_dim]: channel h * head_dim + j is head h's j-th (diffusers'
  // view(N, -1, heads, head_dim) and Sana's unflatten(1, (heads, -1)) agree).
  auto split_heads = [&](const torch::Tensor& projected) {
    return projected.reshape({rows, projected.size(1), heads, head_dim}).transpose(1, 2);
  };
  torch::Tensor attended;
  if (options.core() == AttentionCoreKind::softmax) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    attended = nn::run_attention_core(runner, split_heads(query), split_heads(key), split_heads(value), mask, scale);
  } else {
    // An attention-core region: selective checkpointing recomputes it (its fp32 copies of q, k, v are the large
    // saved tensors) rather than keeping them.
    auto linear_core = [](const std::vector<torch::Tensor>& qkv) {
      return nn::relu_linear_attention(torch::relu(qkv[0]), torch::relu(qkv[1]), qkv[2], kLinearAttentionEps);
    };
    attended = nn::run_region(runner, nn::RegionKind::attention_core, linear_core,
                              {split_heads(query), split_heads(key), split_heads(value)});
  }
  return output->forward(attended.transpose(1, 2).reshape({rows, length, heads * head_dim}));
}

AdaLayerNormSingleImpl::AdaLayerNormSingleImpl(int64_t dim) {
  timestep_embedder = nn::TimestepEmbedder(
      nn::TimestepEmbedderOptions(dim).frequency_embedding_size(256).naming(nn::TimestepEmbedderNaming::diffusers));
  auto emb = register_module("emb", parameter_free_holder());
  emb->register_module("timestep_embedder", timestep_embedder);
  linear = register_module("linear", make_linear(dim, 6 * dim));
}

std::pair<torch::Tensor, torch::Tensor> AdaLayerNormSingleImpl::forward(const torch::Tensor& t) {
  torch::Tensor embedded = timestep_embedder(t);
  return {nn::linear(linear, torch::silu(embedded)), embedded};
}

CaptionProjectionImpl::CaptionProjectionImpl(int64_t caption_channels, int64_t dim) {
  linear_1 = register_module("linear_1", make_linear(caption_channels, dim));
  linear_2 = register_module("linear_2", make_linear(dim, dim));
}

torch::Tensor CaptionProjectionImpl::forward(const torch::Tensor& caption) {
  return nn::linear(linear_2, nn::gelu_tanh_differentiable(nn::linear(linear_1, caption)));
}

}  // namespace tune::models
