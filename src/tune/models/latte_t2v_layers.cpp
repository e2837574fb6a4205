// Latte-1's layers, written from diffusers' semantics (models/attention.py, attention_processor.py, normalization.py,
// embeddings.py) on tune's shared pieces: nn::linear, nn::run_attention_core, nn::run_modulated_layer_norm.
#include "tune/models/latte_t2v_layers.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "tune/nn/adaln.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/linear.h"

namespace tune::models {

namespace {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias = true) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// A parameter-free holder, so that a child registered in it is named "<holder>.<child>" (diffusers' nesting:
// to_out.0, net.0.proj, emb.timestep_embedder).
std::shared_ptr<torch::nn::Module> holder() { return std::make_shared<torch::nn::Module>(); }

}  // namespace

const std::vector<std::string>& LatteT2VLora::known_targets() {
  static const std::vector<std::string> names = {"to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"};
  return names;
}

bool LatteT2VLora::adapts(const std::string& name) const {
  return options.rank > 0 && std::find(targets.begin(), targets.end(), name) != targets.end();
}

nn::LoraLinearOptions LatteT2VLora::layer(int64_t in, int64_t out, bool bias, const std::string& name) const {
  nn::LoraLinearOptions layer_options(in, out);
  layer_options.bias(bias);
  if (adapts(name)) layer_options.lora(options);
  return layer_options;
}

LatteT2VAttentionImpl::LatteT2VAttentionImpl(int64_t dim, int64_t num_heads_, bool qkv_bias, const LatteT2VLora& lora)
    : num_heads(num_heads_), head_dim(dim / num_heads_) {
  to_q = register_module("to_q", nn::LoraLinear(lora.layer(dim, dim, qkv_bias, "to_q")));
  to_k = register_module("to_k", nn::LoraLinear(lora.layer(dim, dim, qkv_bias, "to_k")));
  to_v = register_module("to_v", nn::LoraLinear(lora.layer(dim, dim, qkv_bias, "to_v")));
  output = nn::LoraLinear(lora.layer(dim, dim, true, "to_out.0"));
  auto to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(output);
}

torch::Tensor LatteT2VAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                             const torch::Tensor& mask, nn::BlockRunner* runner) {
  const int64_t rows = x.size(0);
  const int64_t length = x.size(1);
  // [N, T, D] -> [N, heads, T, head_dim]
  auto heads = [&](const torch::Tensor& projected) {
    return projected.reshape({rows, projected.size(1), num_heads, head_dim}).transpose(1, 2);
  };
  const torch::Tensor query = heads(to_q->forward(x));
  const torch::Tensor key = heads(to_k->forward(context));
  const torch::Tensor value = heads(to_v->forward(context));
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const torch::Tensor attended = nn::run_attention_core(runner, query, key, value, mask, scale);
  return output->forward(attended.transpose(1, 2).reshape({rows, length, num_heads * head_dim}));
}

LatteT2VFeedForwardImpl::LatteT2VFeedForwardImpl(int64_t dim, const LatteT2VLora& lora) {
  up = nn::LoraLinear(lora.layer(dim, 4 * dim, true, "ff.net.0.proj"));
  down = nn::LoraLinear(lora.layer(4 * dim, dim, true, "ff.net.2"));
  auto net = register_module("net", torch::nn::ModuleList());
  auto gelu_projection = holder();
  gelu_projection->register_module("proj", up);
  net->push_back(gelu_projection);
  net->push_back(holder());  // net.1: diffusers' dropout, no parameters
  net->push_back(down);
}

torch::Tensor LatteT2VFeedForwardImpl::forward(const torch::Tensor& x, nn::BlockRunner* runner) {
  auto gelu = [](const std::vector<torch::Tensor>& inputs) { return torch::gelu(inputs[0], "tanh"); };
  return down->forward(nn::run_region(runner, nn::RegionKind::activation, gelu, {up->forward(x)}));
}

LatteT2VBlockImpl::LatteT2VBlockImpl(const LatteT2VConfig& config, bool cross_attention, const LatteT2VLora& lora)
    : norm_eps(config.norm_eps) {
  const int64_t dim = config.inner_dim();
  // Registration order follows diffusers' block (its scale_shift_table comes last, but a module lists its own
  // parameters before its children's either way).
  attn1 = register_module("attn1", LatteT2VAttention(dim, config.num_attention_heads, config.attention_bias, lora));
  if (cross_attention) {
    attn2 = register_module("attn2", LatteT2VAttention(dim, config.num_attention_heads, config.attention_bias, lora));
  }
  ff = register_module("ff", LatteT2VFeedForward(dim, lora));
  scale_shift_table = register_parameter("scale_shift_table", torch::randn({6, dim}) / std::sqrt(static_cast<double>(dim)));
}

torch::Tensor LatteT2VBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& timestep6,
                                         const torch::Tensor& caption, const torch::Tensor& caption_mask,
                                         nn::BlockRunner* runner) {
  const int64_t batch = timestep6.size(0);
  const int64_t rows = x.size(0), length = x.size(1), dim = x.size(2);
  // The modulation is per sample: the norms, gates and cross-attention see a sample's rows as one [B, R * T, D]
  // sequence (the same values as diffusers' per-row repeat of the sample's timestep6), self-attention stays per row.
  const auto modulation = (scale_shift_table.unsqueeze(0) + timestep6).unbind(1);
  const torch::Tensor &shift_msa = modulation[0], &scale_msa = modulation[1], &gate_msa = modulation[2];
  const torch::Tensor &shift_mlp = modulation[3], &scale_mlp = modulation[4], &gate_mlp = modulation[5];

  torch::Tensor hidden = x.reshape({batch, -1, dim});
  const torch::Tensor attention_input =
      nn::run_modulated_layer_norm(runner, hidden, shift_msa, scale_msa, norm_eps).reshape({rows, length, dim});
  const torch::Tensor attended = attn1->forward(attention_input, attention_input, {}, runner);
  hidden = hidden + gate_msa.unsqueeze(1) * attended.reshape({batch, -1, dim});
  if (has_cross_attention()) {
    hidden = hidden + attn2->forward(hidden, caption, caption_mask, runner);
  }
  const torch::Tensor ff_input = nn::run_modulated_layer_norm(runner, hidden, shift_mlp, scale_mlp, norm_eps);
  hidden = hidden + gate_mlp.unsqueeze(1) * ff->forward(ff_input, runner);
  return hidden.reshape({rows, length, dim});
}

AdaLayerNormSingleImpl::AdaLayerNormSingleImpl(int64_t dim) {
  timestep_embedder = nn::TimestepEmbedder(
      nn::TimestepEmbedderOptions(dim).frequency_embedding_size(256).naming(nn::TimestepEmbedderNaming::diffusers));
  auto emb = register_module("emb", holder());
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
  return nn::linear(linear_2, torch::gelu(nn::linear(linear_1, caption), "tanh"));
}

}  // namespace tune::models
