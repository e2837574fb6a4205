// Sana's block, written from diffusers' semantics (models/transformers/sana_transformer.py SanaTransformerBlock,
// attention_processor.py SanaLinearAttnProcessor2_0 / SanaAttnProcessor2_0).
#include "tune/models/sana_layers.h"

#include <cmath>

#include "tune/nn/adaln.h"

namespace tune::models {

const std::vector<std::string>& sana_lora_targets() {
  static const std::vector<std::string> names = {"to_q", "to_k", "to_v", "to_out.0"};
  return names;
}

SanaBlockImpl::SanaBlockImpl(const SanaConfig& config, const SanaLora& lora) : norm_eps(config.norm_eps) {
  const int64_t dim = config.inner_dim();
  attn1 = register_module(
      "attn1", DiffusersAttention(DiffusersAttentionOptions(dim, config.num_attention_heads, config.attention_head_dim)
                                      .qkv_bias(config.attention_bias)
                                      .qk_norm(config.qk_norm)
                                      .core(AttentionCoreKind::relu_linear),
                                  lora));
  // The cross-attention's q / k / v are always biased (diffusers passes bias=True whatever attention_bias says).
  attn2 = register_module(
      "attn2", DiffusersAttention(DiffusersAttentionOptions(dim, config.num_cross_attention_heads,
                                                            config.cross_attention_head_dim)
                                      .context_dim(config.cross_attention_dim)
                                      .qkv_bias(true)
                                      .qk_norm(config.qk_norm),
                                  lora));
  ff = register_module("ff", nn::GLUMBConv(nn::GLUMBConvOptions(dim, dim, config.mlp_ratio)));
  scale_shift_table = register_parameter("scale_shift_table", torch::randn({6, dim}) / std::sqrt(static_cast<double>(dim)));
}

torch::Tensor SanaBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& timestep6, const torch::Tensor& caption,
                                     const torch::Tensor& caption_mask, int64_t grid_height, int64_t grid_width,
                                     nn::BlockRunner* runner) {
  const int64_t batch = x.size(0), dim = x.size(2);
  const auto modulation = (scale_shift_table.unsqueeze(0) + timestep6).unbind(1);
  const torch::Tensor &shift_msa = modulation[0], &scale_msa = modulation[1], &gate_msa = modulation[2];
  const torch::Tensor &shift_mlp = modulation[3], &scale_mlp = modulation[4], &gate_mlp = modulation[5];

  torch::Tensor hidden = x;
  const torch::Tensor attention_input = nn::run_modulated_layer_norm(runner, hidden, shift_msa, scale_msa, norm_eps);
  hidden = hidden + gate_msa.unsqueeze(1) * attn1->forward(attention_input, attention_input, {}, runner);
  hidden = hidden + attn2->forward(hidden, caption, caption_mask, runner);
  // The feed-forward convolves the token grid: [B, H*W, D] -> [B, D, H, W] and back.
  const torch::Tensor ff_input = nn::run_modulated_layer_norm(runner, hidden, shift_mlp, scale_mlp, norm_eps);
  const torch::Tensor grid = ff_input.transpose(1, 2).reshape({batch, dim, grid_height, grid_width});
  const torch::Tensor ff_output = ff->forward(grid).flatten(2).transpose(1, 2);
  return hidden + gate_mlp.unsqueeze(1) * ff_output;
}

}  // namespace tune::models
