// Sana forward: patch tokens (+ the 2-D table when configured), adaLN-single and the caption's projection and norm
// once per sample, the block stack through the runner (timestep6 and caption carried in the state), the modulated
// output norm, proj_out and unpatchify, following diffusers' SanaTransformer2DModel.forward step by step.
#include "tune/models/sana.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/nn/init.h>

#include <cmath>
#include <stdexcept>

#include "tune/nn/adaln.h"
#include "tune/nn/linear.h"
#include "tune/nn/sincos_position.h"

namespace tune::models {
namespace {

constexpr int64_t kModulationRows = 6;
// diffusers' SanaModulatedNorm is LayerNorm(eps=1e-6) and caption_norm RMSNorm(eps=1e-5), whatever norm_eps says.
constexpr double kOutputNormEps = 1e-6;
constexpr double kCaptionNormEps = 1e-5;
// The official caption-norm initial weight (y_norm_scale_factor 0.01 in the released training configs).
constexpr double kCaptionNormInit = 0.01;
constexpr double kMaskedScore = -10000.0;

void check_inputs(const SanaConfig& config, const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                  const torch::Tensor& text_mask) {
  const int64_t patch = config.patch_size;
  if (x.dim() != 4 || x.size(1) != config.in_channels || x.size(2) == 0 || x.size(3) == 0 || x.size(2) % patch != 0 ||
      x.size(3) % patch != 0) {
    throw std::invalid_argument(fmt::format("Sana: x must be [batch, {}, height, width] with height and width "
                                            "positive multiples of {}, got [{}]",
                                            config.in_channels, patch, fmt::join(x.sizes(), ", ")));
  }
  const int64_t batch = x.size(0);
  if (t.numel() != batch) {
    throw std::invalid_argument(fmt::format("Sana: t must hold one timestep per sample ({}), got [{}]", batch,
                                            fmt::join(t.sizes(), ", ")));
  }
  check_caption_inputs("Sana", batch, config.caption_channels, text, text_mask);
}

}  // namespace

SanaImpl::SanaImpl(const SanaConfig& config, const SanaLora& lora)
    : config_(config), lora_(lora), runner_(std::make_shared<nn::PlainBlockRunner>()) {
  config_.validate();
  const int64_t dim = config_.inner_dim();
  patch_embed = register_module(
      "patch_embed", nn::PatchEmbed(nn::PatchEmbedOptions(config_.sample_size, config_.patch_size, config_.in_channels, dim)
                                        .strict_image_size(false)));
  time_embed = register_module("time_embed", AdaLayerNormSingle(dim));
  caption_projection = register_module("caption_projection", CaptionProjection(config_.caption_channels, dim));
  caption_norm = register_module("caption_norm", nn::RMSNorm(nn::RMSNormOptions(dim).eps(kCaptionNormEps)));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.num_layers; ++i) transformer_blocks->push_back(SanaBlock(config_, lora_));
  scale_shift_table = register_parameter("scale_shift_table", torch::zeros({2, dim}));
  proj_out = register_module("proj_out", torch::nn::Linear(torch::nn::LinearOptions(
                                             dim, config_.patch_size * config_.patch_size * config_.out_channels)));
  reset_parameters();
}

void SanaImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  // Base weights only: an adapter keeps PEFT's initialisation (lora_B zero, so a fresh adapter changes nothing).
  init_linears_xavier(*this);
  const torch::Tensor& proj_weight = patch_embed->proj->weight;
  torch::nn::init::xavier_uniform_(proj_weight.view({proj_weight.size(0), -1}));
  torch::nn::init::zeros_(patch_embed->proj->bias);
  for (const auto* linear : {&time_embed->timestep_embedder->linear_1, &time_embed->timestep_embedder->linear_2,
                             &time_embed->linear, &caption_projection->linear_1, &caption_projection->linear_2}) {
    torch::nn::init::normal_((*linear)->weight, 0.0, 0.02);
  }
  caption_norm->weight.fill_(kCaptionNormInit);
  const double table_scale = 1.0 / std::sqrt(static_cast<double>(config_.inner_dim()));
  scale_shift_table.copy_(torch::randn_like(scale_shift_table) * table_scale);
  for (const auto& module : *transformer_blocks) {
    auto& block = *module->as<SanaBlockImpl>();
    block.scale_shift_table.copy_(torch::randn_like(block.scale_shift_table) * table_scale);
    // The GLUMBConv convolutions keep LibTorch's (PyTorch's) Conv2d initialisation, as the official code.
    torch::nn::init::zeros_(block.attn2->output->weight);
    torch::nn::init::zeros_(block.attn2->output->bias);
  }
  torch::nn::init::zeros_(proj_out->weight);
  torch::nn::init::zeros_(proj_out->bias);
}

std::vector<std::shared_ptr<torch::nn::Module>> SanaImpl::blocks() const {
  std::vector<std::shared_ptr<torch::nn::Module>> result;
  for (const auto& module : *transformer_blocks) result.push_back(module);
  return result;
}

torch::Tensor SanaImpl::forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                                const torch::Tensor& text_mask) {
  check_inputs(config_, x, t, text, text_mask);
  const int64_t batch = x.size(0);
  const int64_t patch = config_.patch_size;
  const int64_t grid_height = x.size(2) / patch, grid_width = x.size(3) / patch;
  const int64_t tokens_per_image = grid_height * grid_width;
  const int64_t dim = config_.inner_dim();
  const int64_t text_length = text.size(1);
  const torch::Device device = patch_embed->proj->weight.device();
  const auto parameter_dtype = patch_embed->proj->weight.scalar_type();

  // Tokens [B, N, D]; the residual stream in at least fp32 (an autocast bf16 convolution output is cast up).
  torch::Tensor tokens = patch_embed(x.to(device, parameter_dtype));
  const auto state_dtype = torch::promote_types(tokens.scalar_type(), torch::kFloat32);
  tokens = tokens.to(state_dtype);
  if (config_.interpolation_scale) {
    tokens = tokens + nn::sincos_2d_embedding(dim, grid_height, grid_width, static_cast<double>(config_.base_size()),
                                              *config_.interpolation_scale)
                          .to(device, state_dtype);
  }

  const auto [timestep6, embedded_timestep] = time_embed(t.reshape({-1}).to(device));
  const torch::Tensor caption = caption_norm(caption_projection(text.to(device, parameter_dtype)));
  const torch::Tensor state = torch::cat(
      {tokens, timestep6.reshape({batch, kModulationRows, dim}).to(state_dtype), caption.to(state_dtype)}, 1);

  torch::Tensor mask_bias;  // [B, 1, 1, L], broadcast over heads and queries
  if (text_mask.defined()) {
    mask_bias = ((1 - text_mask.to(device, state_dtype)) * kMaskedScore).reshape({batch, 1, 1, text_length});
  }

  std::vector<std::shared_ptr<SanaBlockImpl>> layers;
  std::vector<std::vector<torch::Tensor>> parameters;
  for (const auto& module : *transformer_blocks) {
    layers.push_back(std::dynamic_pointer_cast<SanaBlockImpl>(module));
    parameters.push_back(trainable_parameters(*layers.back()));
  }
  // Captured by value: a checkpointing runner calls the blocks again in backward, after this frame is gone.
  auto block = [layers, runner = runner_, mask_bias, tokens_per_image, text_length, grid_height,
                grid_width](int64_t i, const torch::Tensor& block_state) {
    const torch::Tensor hidden = block_state.narrow(1, 0, tokens_per_image);
    const torch::Tensor payload = block_state.narrow(1, tokens_per_image, kModulationRows + text_length);
    const torch::Tensor out =
        layers[static_cast<size_t>(i)]->forward(hidden, payload.narrow(1, 0, kModulationRows),
                                                payload.narrow(1, kModulationRows, text_length), mask_bias,
                                                grid_height, grid_width, runner.get());
    return torch::cat({out, payload.to(out.scalar_type())}, 1);
  };
  auto params_of = [parameters](int64_t i) { return parameters[static_cast<size_t>(i)]; };
  const torch::Tensor result = runner_->run_stack(num_blocks(), block, state, params_of);

  // Output: norm_out modulated by (shift, scale) = scale_shift_table + embedded timestep, proj_out, unpatchify
  // [B, h, w, p, q, c] -> [B, c, h, p, w, q].
  const torch::Tensor hidden = result.narrow(1, 0, tokens_per_image);
  const auto shift_scale = (scale_shift_table.unsqueeze(0) + embedded_timestep.unsqueeze(1)).unbind(1);
  const torch::Tensor normed = nn::modulated_layer_norm(hidden, shift_scale[0], shift_scale[1], kOutputNormEps);
  torch::Tensor output = nn::linear(proj_out, normed)
                             .reshape({batch, grid_height, grid_width, patch, patch, config_.out_channels})
                             .permute({0, 5, 1, 3, 2, 4})
                             .reshape({batch, config_.out_channels, grid_height * patch, grid_width * patch});
  return output.to(torch::promote_types(output.scalar_type(), torch::kFloat32));
}

}  // namespace tune::models
