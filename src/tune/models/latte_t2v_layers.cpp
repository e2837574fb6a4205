// Latte-1's layers, written from diffusers' semantics (models/attention.py, attention_processor.py, normalization.py,
// embeddings.py) on tune's shared pieces: diffusers_layers, nn::run_modulated_layer_norm.
#include "tune/models/latte_t2v_layers.h"

#include <cmath>

#include "tune/nn/adaln.h"
#include "tune/nn/gelu_linear.h"
#include "tune/nn/gelu_tanh.h"

namespace tune::models {

const std::vector<std::string>& latte_t2v_lora_targets() {
  static const std::vector<std::string> names = {"to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"};
  return names;
}

LatteT2VFeedForwardImpl::LatteT2VFeedForwardImpl(int64_t dim, const LatteT2VLora& lora) {
  up = nn::LoraLinear(lora.layer(dim, 4 * dim, true, "ff.net.0.proj"));
  down = nn::LoraLinear(lora.layer(4 * dim, dim, true, "ff.net.2"));
  auto net = register_module("net", torch::nn::ModuleList());
  auto gelu_projection = parameter_free_holder();
  gelu_projection->register_module("proj", up);
  net->push_back(gelu_projection);
  net->push_back(parameter_free_holder());  // net.1: diffusers' dropout, no parameters
  net->push_back(down);
}

torch::Tensor LatteT2VFeedForwardImpl::forward(const torch::Tensor& x, nn::BlockRunner* runner) {
  const torch::Tensor hidden = up->forward(x);
  // A plain net.2 (no adapter, no NF4 base) recomputes GELU in its backward wherever the block's graph lives until
  // backward and its weight trains (nn::run_gelu_linear); an adapter's lora_A needs GELU's output kept anyway.
  if (!down->has_lora() && !down->nf4_base()) return nn::run_gelu_linear(runner, down->weight, down->bias, hidden);
  auto gelu = [](const std::vector<torch::Tensor>& inputs) { return nn::gelu_tanh_differentiable(inputs[0]); };
  return down->forward(nn::run_region(runner, nn::RegionKind::activation, gelu, {hidden}));
}

LatteT2VBlockImpl::LatteT2VBlockImpl(const LatteT2VConfig& config, bool cross_attention, const LatteT2VLora& lora)
    : norm_eps(config.norm_eps) {
  const int64_t dim = config.inner_dim();
  // Registration order follows diffusers' block (its scale_shift_table comes last, but a module lists its own
  // parameters before its children's either way).
  const auto attention = DiffusersAttentionOptions(dim, config.num_attention_heads, config.attention_head_dim)
                             .qkv_bias(config.attention_bias);
  attn1 = register_module("attn1", DiffusersAttention(attention, lora));
  if (cross_attention) attn2 = register_module("attn2", DiffusersAttention(attention, lora));
  ff = register_module("ff", LatteT2VFeedForward(dim, lora));
  scale_shift_table = register_parameter("scale_shift_table", torch::randn({6, dim}) / std::sqrt(static_cast<double>(dim)));
}

torch::Tensor LatteT2VBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& timestep6,
                                         const torch::Tensor& caption, const torch::Tensor& caption_mask,
                                         nn::BlockRunner* runner, int64_t image_rows) {
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
    hidden = hidden + (image_rows == 0
                           ? attn2->forward(hidden, caption, caption_mask, runner)
                           : cross_attend_with_images(hidden, length, caption, caption_mask, runner, image_rows));
  }
  const torch::Tensor ff_input = nn::run_modulated_layer_norm(runner, hidden, shift_mlp, scale_mlp, norm_eps);
  hidden = hidden + gate_mlp.unsqueeze(1) * ff->forward(ff_input, runner);
  return hidden.reshape({rows, length, dim});
}

torch::Tensor LatteT2VBlockImpl::cross_attend_with_images(const torch::Tensor& hidden, int64_t row_length,
                                                           const torch::Tensor& caption,
                                                           const torch::Tensor& caption_mask, nn::BlockRunner* runner,
                                                           int64_t image_rows) {
  const int64_t batch = hidden.size(0), dim = hidden.size(2);
  const int64_t video_tokens = hidden.size(1) - image_rows * row_length;
  const int64_t text_length = caption.size(1) / (1 + image_rows);
  // The video's rows attend to the first caption as one sequence per sample (as without images); each image's row
  // to its own caption, as a batch of B * n single rows.
  const torch::Tensor video_mask =
      caption_mask.defined() ? caption_mask.narrow(1, 0, 1).reshape({batch, 1, 1, text_length}) : torch::Tensor();
  const torch::Tensor image_mask =
      caption_mask.defined() ? caption_mask.narrow(1, 1, image_rows).reshape({batch * image_rows, 1, 1, text_length})
                             : torch::Tensor();
  const torch::Tensor video = attn2->forward(hidden.narrow(1, 0, video_tokens), caption.narrow(1, 0, text_length),
                                             video_mask, runner);
  const torch::Tensor image_queries =
      hidden.narrow(1, video_tokens, image_rows * row_length).reshape({batch * image_rows, row_length, dim});
  const torch::Tensor image_captions =
      caption.narrow(1, text_length, image_rows * text_length).reshape({batch * image_rows, text_length, dim});
  const torch::Tensor images = attn2->forward(image_queries, image_captions, image_mask, runner);
  return torch::cat({video, images.reshape({batch, image_rows * row_length, dim})}, 1);
}

}  // namespace tune::models
