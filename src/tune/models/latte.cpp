// Latte forward: per-frame patch embedding, alternating spatial/temporal adaLN-Zero blocks (through the block
// runner), final adaLN layer and unpatchify, following the official models/latte.py step by step.
#include "tune/models/latte.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/nn/init.h>

#include "tune/nn/sincos_position.h"

namespace tune::models {
namespace {

std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> trainable;
  for (const auto& parameter : module.parameters()) {
    if (parameter.requires_grad()) trainable.push_back(parameter);
  }
  return trainable;
}

void xavier_linear(torch::nn::Module& module) {
  for (auto& child : module.modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(child.get())) {
      torch::nn::init::xavier_uniform_(linear->weight);
      if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
    }
  }
}

torch::nn::LinearImpl& modulation_linear(torch::nn::Sequential& modulation) { return *modulation->ptr<torch::nn::LinearImpl>(1); }

}  // namespace

LatteImpl::LatteImpl(const LatteConfig& config) : config_(config), runner_(std::make_shared<nn::PlainBlockRunner>()) {
  config_.validate();
  const int64_t hidden = config_.hidden_size;
  // Registration order follows the official module so named_parameters() lists the checkpoint's order.
  x_embedder = register_module("x_embedder", nn::PatchEmbed(nn::PatchEmbedOptions(config_.input_size, config_.patch_size,
                                                                                    config_.in_channels, hidden)));
  t_embedder = register_module("t_embedder", nn::TimestepEmbedder(nn::TimestepEmbedderOptions(hidden)));
  if (config_.class_conditional()) {
    y_embedder = register_module("y_embedder", LabelEmbedder(config_.num_classes, hidden, config_.class_dropout_prob));
  }
  pos_embed = register_parameter("pos_embed", torch::zeros({1, config_.num_patches(), hidden}), /*requires_grad=*/false);
  temp_embed = register_parameter("temp_embed", torch::zeros({1, config_.num_frames, hidden}), /*requires_grad=*/false);
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.depth; ++i) blocks_->push_back(LatteBlock(config_));
  final_layer = register_module("final_layer", LatteFinalLayer(config_));
  reset_parameters();
}

void LatteImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  xavier_linear(*this);
  const int64_t hidden = config_.hidden_size;
  pos_embed.copy_(nn::sincos_2d_embedding(hidden, config_.grid_size()).unsqueeze(0));
  temp_embed.copy_(nn::sincos_temporal_embedding(hidden, config_.num_frames).unsqueeze(0));
  // The patch embedding initialised like a Linear over the flattened patch, not like a Conv2d.
  const torch::Tensor& proj_weight = x_embedder->proj->weight;
  torch::nn::init::xavier_uniform_(proj_weight.view({proj_weight.size(0), -1}));
  torch::nn::init::zeros_(x_embedder->proj->bias);
  if (y_embedder) torch::nn::init::normal_(y_embedder->embedding_table->weight, 0.0, 0.02);
  torch::nn::init::normal_(t_embedder->mlp->ptr<torch::nn::LinearImpl>(0)->weight, 0.0, 0.02);
  torch::nn::init::normal_(t_embedder->mlp->ptr<torch::nn::LinearImpl>(2)->weight, 0.0, 0.02);
  // adaLN-Zero: every block starts as the identity, and the output as zero.
  for (const auto& module : *blocks_) {
    auto& linear = modulation_linear(module->as<LatteBlockImpl>()->adaLN_modulation);
    torch::nn::init::zeros_(linear.weight);
    torch::nn::init::zeros_(linear.bias);
  }
  auto& final_modulation = modulation_linear(final_layer->adaLN_modulation);
  torch::nn::init::zeros_(final_modulation.weight);
  torch::nn::init::zeros_(final_modulation.bias);
  torch::nn::init::zeros_(final_layer->linear->weight);
  torch::nn::init::zeros_(final_layer->linear->bias);
}

std::vector<std::shared_ptr<torch::nn::Module>> LatteImpl::blocks() const {
  std::vector<std::shared_ptr<torch::nn::Module>> result;
  for (const auto& block : *blocks_) result.push_back(block);
  return result;
}

torch::Tensor LatteImpl::condition(const torch::Tensor& t, const torch::Tensor& y, const torch::Tensor& force_drop_ids) {
  torch::Tensor c = t_embedder(t);
  if (config_.class_conditional()) {
    if (!y.defined()) {
      throw std::invalid_argument("Latte: class labels y are required by a class-conditional model (extras 2)");
    }
    c = c + y_embedder(y.to(c.device()), is_training(), force_drop_ids);
  }
  return c;
}

torch::Tensor LatteImpl::unpatchify(const torch::Tensor& tokens) const {
  const int64_t channels = config_.out_channels();
  const int64_t patch = config_.patch_size;
  const int64_t grid = config_.grid_size();
  // [N, h, w, p, q, c] -> [N, c, h, p, w, q] (the official einsum 'nhwpqc->nchpwq')
  return tokens.reshape({tokens.size(0), grid, grid, patch, patch, channels})
      .permute({0, 5, 1, 3, 2, 4})
      .reshape({tokens.size(0), channels, grid * patch, grid * patch});
}

torch::Tensor LatteImpl::forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& y,
                                 const torch::Tensor& force_drop_ids) {
  const int64_t size = config_.input_size;
  if (x.dim() != 5 || x.size(1) != config_.num_frames || x.size(2) != config_.in_channels || x.size(3) != size ||
      x.size(4) != size) {
    throw std::invalid_argument(fmt::format("Latte: x must be [batch, {}, {}, {}, {}] (frames, channels, height, width), got [{}]",
                                            config_.num_frames, config_.in_channels, size, size, fmt::join(x.sizes(), ", ")));
  }
  const int64_t batch = x.size(0);
  if (t.numel() != batch) {
    throw std::invalid_argument(fmt::format("Latte: t must hold one timestep per sample ({}), got [{}]", batch,
                                            fmt::join(t.sizes(), ", ")));
  }
  if (config_.class_conditional() && y.defined() && y.numel() != batch) {
    throw std::invalid_argument(fmt::format("Latte: y must hold one label per sample ({}), got [{}]", batch,
                                            fmt::join(y.sizes(), ", ")));
  }
  const int64_t frames = config_.num_frames;
  const int64_t patches = config_.num_patches();
  const int64_t hidden = config_.hidden_size;

  // (b f) frames -> tokens [B*F, T, D]: the stack's state, in the spatial layout. Laid out in token order once here:
  // the patch embedding is a transposed view of its convolution's output, which the sum with pos_embed keeps, and
  // every block's output would keep it too (tune's CPU norm kernels take contiguous rows only).
  const torch::Tensor tokens = (x_embedder(x.flatten(0, 1)) + pos_embed).contiguous();
  const torch::Tensor c = condition(t.reshape({-1}).to(x.device()), y, force_drop_ids).to(tokens.scalar_type());

  std::vector<std::shared_ptr<LatteBlockImpl>> layers;
  for (int64_t i = 0; i < config_.depth; ++i) layers.push_back(blocks_->ptr<LatteBlockImpl>(i));
  // Every block takes and returns the stack's state in the spatial layout, (b f) t d: a temporal block attends over
  // the frames at each token by laying out its q, k and v so (LatteAttentionImpl::forward), in the copies it makes
  // of them anyway. The official code rearranges the residual stream to (b t) f d and back around each temporal
  // block instead; per token the maths is the same, and the relayout copies (each a pass over the fp32 stream:
  // 6 MiB at Latte-S/2's 4096 tokens, once in forward, again in a recompute and again for the gradient) are gone,
  // one of them from the last block's recompute at the start of backward, where `full`'s peak is.
  // Captured by value: a checkpointing runner calls the blocks again in backward, after this frame is gone.
  auto block = [layers, runner = runner_, temp_embed = temp_embed, c, batch, frames, patches, hidden](
                   int64_t i, const torch::Tensor& states) {
    const auto& layer = layers[static_cast<size_t>(i)];
    // Each sample's conditioning repeated over its frames' rows.
    if (block_kind(i) == LatteBlockKind::spatial) return layer->forward(states, c, runner.get(), frames);
    // The official adds temp_embed (one row per frame) before the first temporal block.
    const torch::Tensor input =
        i == 1 ? (states.reshape({batch, frames, patches, hidden}) + temp_embed.view({1, frames, 1, hidden}))
                     .view({batch * frames, patches, hidden})
               : states;
    return layer->forward(input, c, runner.get(), frames, /*temporal_frames=*/frames);
  };
  // c is listed with every block's parameters: a recomputing runner then returns its gradient, so the timestep
  // and label embedders train under checkpointing (a runner takes a tensor shared by the blocks of one segment
  // once).
  auto params_of = [&layers, &c](int64_t i) {
    std::vector<torch::Tensor> params = trainable_parameters(*layers[static_cast<size_t>(i)]);
    if (c.requires_grad()) params.push_back(c);
    return params;
  };
  const torch::Tensor hidden_states = runner_->run_stack(config_.depth, block, tokens, params_of);

  torch::Tensor output = unpatchify(final_layer(hidden_states, c.repeat_interleave(frames, 0)));
  output = output.reshape({batch, frames, config_.out_channels(), size, size});
  return output.to(torch::promote_types(output.scalar_type(), torch::kFloat32));
}

}  // namespace tune::models
