// LatteT2V forward: patch embedding + 2-D table, adaLN-single and caption projection once per sample, the block
// stack through the runner (spatial/temporal alternation, payload carried in the state), the final modulated norm,
// proj_out and unpatchify, following diffusers' LatteTransformer3DModel.forward step by step.
#include "tune/models/latte_t2v.h"

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

// adaln_single's timestep6 rows: shift, scale and gate for attention and feed-forward.
constexpr int64_t kModulationRows = 6;
// diffusers' norm_out is LayerNorm(eps=1e-6) whatever norm_eps says.
constexpr double kOutputNormEps = 1e-6;
// The official code's text-mask bias for hidden tokens (diffusers' docstring names the same value).
constexpr double kMaskedScore = -10000.0;

void check_inputs(const LatteT2VConfig& config, const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                  const torch::Tensor& text_mask, int64_t image_frames) {
  const int64_t patch = config.patch_size;
  if (x.dim() != 5 || x.size(1) < 1 || x.size(2) != config.in_channels || x.size(3) % patch != 0 ||
      x.size(4) % patch != 0 || x.size(3) == 0 || x.size(4) == 0) {
    throw std::invalid_argument(fmt::format("LatteT2V: x must be [batch, frames, {}, height, width] with height and "
                                            "width positive multiples of {}, got [{}]",
                                            config.in_channels, patch, fmt::join(x.sizes(), ", ")));
  }
  const int64_t batch = x.size(0);
  if (t.numel() != batch) {
    throw std::invalid_argument(fmt::format("LatteT2V: t must hold one timestep per sample ({}), got [{}]", batch,
                                            fmt::join(t.sizes(), ", ")));
  }
  if (image_frames == 0) {
    check_caption_inputs("LatteT2V", batch, config.caption_channels, text, text_mask);
    return;
  }
  const int64_t captions = 1 + image_frames;
  if (image_frames < 0 || image_frames >= x.size(1)) {
    throw std::invalid_argument(fmt::format("LatteT2V: image_frames ({}) must leave at least one video frame of the "
                                            "{}", image_frames, x.size(1)));
  }
  if (text.dim() != 4 || text.size(0) != batch || text.size(1) != captions || text.size(3) != config.caption_channels) {
    throw std::invalid_argument(fmt::format("LatteT2V: with {} image frames, text must be [{}, {}, tokens, {}], got "
                                            "[{}]", image_frames, batch, captions, config.caption_channels,
                                            fmt::join(text.sizes(), ", ")));
  }
  if (text_mask.defined() && text_mask.sizes() != c10::IntArrayRef({batch, captions, text.size(2)})) {
    throw std::invalid_argument(fmt::format("LatteT2V: text_mask must be [{}, {}, {}], got [{}]", batch, captions,
                                            text.size(2), fmt::join(text_mask.sizes(), ", ")));
  }
}

}  // namespace

LatteT2VImpl::LatteT2VImpl(const LatteT2VConfig& config, const LatteT2VLora& lora)
    : config_(config), lora_(lora), runner_(std::make_shared<nn::PlainBlockRunner>()) {
  config_.validate();
  const int64_t dim = config_.inner_dim();
  pos_embed = register_module("pos_embed", nn::PatchEmbed(nn::PatchEmbedOptions(config_.sample_size, config_.patch_size,
                                                                                 config_.in_channels, dim)
                                                              .strict_image_size(false)));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  temporal_transformer_blocks = register_module("temporal_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    transformer_blocks->push_back(LatteT2VBlock(config_, /*cross_attention=*/true, lora_));
    temporal_transformer_blocks->push_back(LatteT2VBlock(config_, /*cross_attention=*/false, lora_));
  }
  scale_shift_table = register_parameter("scale_shift_table", torch::zeros({2, dim}));
  proj_out = register_module("proj_out", torch::nn::Linear(torch::nn::LinearOptions(
                                             dim, config_.patch_size * config_.patch_size * config_.out_channels)));
  adaln_single = register_module("adaln_single", AdaLayerNormSingle(dim));
  caption_projection = register_module("caption_projection", CaptionProjection(config_.caption_channels, dim));
  reset_parameters();
}

void LatteT2VImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  // Base weights only: an adapter keeps PEFT's initialisation (lora_B zero, so a fresh adapter changes nothing).
  init_linears_xavier(*this);
  // The patch embedding initialised like a Linear over the flattened patch, not like a Conv2d.
  const torch::Tensor& proj_weight = pos_embed->proj->weight;
  torch::nn::init::xavier_uniform_(proj_weight.view({proj_weight.size(0), -1}));
  torch::nn::init::zeros_(pos_embed->proj->bias);
  for (const auto* linear : {&adaln_single->timestep_embedder->linear_1, &adaln_single->timestep_embedder->linear_2,
                             &adaln_single->linear, &caption_projection->linear_1, &caption_projection->linear_2}) {
    torch::nn::init::normal_((*linear)->weight, 0.0, 0.02);
  }
  const double table_scale = 1.0 / std::sqrt(static_cast<double>(config_.inner_dim()));
  scale_shift_table.copy_(torch::randn_like(scale_shift_table) * table_scale);
  for (int64_t i = 0; i < num_blocks(); ++i) {
    LatteT2VBlockImpl& block = block_at(i);
    block.scale_shift_table.copy_(torch::randn_like(block.scale_shift_table) * table_scale);
    // PixArt zeroes the cross-attention output, so a fresh model starts unconditioned on the text.
    if (block.has_cross_attention()) {
      torch::nn::init::zeros_(block.attn2->output->weight);
      torch::nn::init::zeros_(block.attn2->output->bias);
    }
  }
  torch::nn::init::zeros_(proj_out->weight);
  torch::nn::init::zeros_(proj_out->bias);
}

LatteT2VBlockImpl& LatteT2VImpl::block_at(int64_t block_index) const {
  const auto& list = is_spatial(block_index) ? transformer_blocks : temporal_transformer_blocks;
  return *list->ptr<LatteT2VBlockImpl>(static_cast<size_t>(block_index / 2));
}

std::vector<std::shared_ptr<torch::nn::Module>> LatteT2VImpl::blocks() const {
  std::vector<std::shared_ptr<torch::nn::Module>> result;
  for (int64_t i = 0; i < num_blocks(); ++i) {
    const auto& list = is_spatial(i) ? transformer_blocks : temporal_transformer_blocks;
    result.push_back(list->ptr(static_cast<size_t>(i / 2)));
  }
  return result;
}

torch::Tensor LatteT2VImpl::position_table(int64_t grid_height, int64_t grid_width) const {
  return nn::sincos_2d_embedding(config_.inner_dim(), grid_height, grid_width, static_cast<double>(config_.base_size()),
                                 static_cast<double>(config_.interpolation_scale()));
}

torch::Tensor LatteT2VImpl::unpatchify(const torch::Tensor& tokens, int64_t batch, int64_t frames, int64_t grid_height,
                                       int64_t grid_width) const {
  const int64_t patch = config_.patch_size;
  const int64_t channels = config_.out_channels;
  // [n, h, w, p, q, c] -> [n, c, h, p, w, q] (diffusers' einsum 'nhwpqc->nchpwq'), n = (b f)
  return tokens.reshape({batch * frames, grid_height, grid_width, patch, patch, channels})
      .permute({0, 5, 1, 3, 2, 4})
      .reshape({batch, frames, channels, grid_height * patch, grid_width * patch});
}

torch::Tensor LatteT2VImpl::forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                                    const torch::Tensor& text_mask, bool temporal_attention, int64_t image_frames) {
  check_inputs(config_, x, t, text, text_mask, image_frames);
  const int64_t batch = x.size(0), frames = x.size(1), video_frames = frames - image_frames;
  const int64_t grid_height = x.size(3) / config_.patch_size, grid_width = x.size(4) / config_.patch_size;
  const int64_t patches = grid_height * grid_width;
  const int64_t dim = config_.inner_dim();
  const int64_t text_length = image_frames == 0 ? text.size(1) : (1 + image_frames) * text.size(2);  // payload rows
  const torch::Device device = pos_embed->proj->weight.device();
  const auto parameter_dtype = pos_embed->proj->weight.scalar_type();

  // (b f) frames -> tokens [B*F, N, D], the residual stream in at least fp32 (an autocast bf16 convolution output
  // is cast up before the table is added, as class Latte keeps it).
  torch::Tensor tokens = pos_embed(x.to(device, parameter_dtype).flatten(0, 1));
  const auto state_dtype = torch::promote_types(tokens.scalar_type(), torch::kFloat32);
  tokens = tokens.to(state_dtype) + position_table(grid_height, grid_width).to(device, state_dtype);

  // Once per sample: the blocks' modulation timestep6 [B, 6D], the output norm's embedded timestep [B, D], and
  // the projected caption [B, L, D] (diffusers repeats the caption per frame before the cross-attention).
  const auto [timestep6, embedded_timestep] = adaln_single(t.reshape({-1}).to(device));
  const torch::Tensor caption =
      caption_projection(text.to(device, parameter_dtype)).reshape({batch, text_length, dim});

  // The payload: timestep6 as 6 rows of D, then the caption, spread over the sample's frame rows (see the header).
  const int64_t payload_rows = kModulationRows + text_length;
  const int64_t payload_per_frame = (payload_rows + frames - 1) / frames;
  torch::Tensor payload =
      torch::cat({timestep6.reshape({batch, kModulationRows, dim}).to(state_dtype), caption.to(state_dtype)}, 1);
  payload = torch::constant_pad_nd(payload, {0, 0, 0, frames * payload_per_frame - payload_rows});
  const torch::Tensor state = torch::cat({tokens, payload.reshape({batch * frames, payload_per_frame, dim})}, 1);

  // [B, 1, 1, L], broadcast over heads and queries; with images [B, 1 + n, L] (the spatial blocks split it)
  torch::Tensor mask_bias;
  if (text_mask.defined()) {
    mask_bias = (1 - text_mask.to(device, state_dtype)) * kMaskedScore;
    if (image_frames == 0) mask_bias = mask_bias.reshape({batch, 1, 1, text_length});
  }
  torch::Tensor temporal_table;  // diffusers adds none to a single frame; with images, the video frames' only
  if (video_frames > 1) temporal_table = nn::sincos_temporal_embedding(dim, video_frames).to(device, state_dtype);

  std::vector<std::shared_ptr<LatteT2VBlockImpl>> layers;
  std::vector<std::vector<torch::Tensor>> parameters;
  for (int64_t i = 0; i < num_blocks(); ++i) {
    const auto& list = is_spatial(i) ? transformer_blocks : temporal_transformer_blocks;
    layers.push_back(list->ptr<LatteT2VBlockImpl>(static_cast<size_t>(i / 2)));
    parameters.push_back(trainable_parameters(*layers.back()));
  }
  // Captured by value: a checkpointing runner calls the blocks again in backward, after this frame is gone.
  auto block = [layers, runner = runner_, mask_bias, temporal_table, batch, frames, video_frames, image_frames, patches,
                dim, text_length, payload_per_frame](int64_t i, const torch::Tensor& block_state) {
    const torch::Tensor hidden = block_state.narrow(1, 0, patches);
    const torch::Tensor block_payload = block_state.narrow(1, patches, payload_per_frame);
    const torch::Tensor sample_payload = block_payload.reshape({batch, frames * payload_per_frame, dim});
    const torch::Tensor block_timestep6 = sample_payload.narrow(1, 0, kModulationRows);
    const auto& layer = layers[static_cast<size_t>(i)];
    torch::Tensor out;
    if (is_spatial(i)) {
      const torch::Tensor block_caption = sample_payload.narrow(1, kModulationRows, text_length);
      out = layer->forward(hidden, block_timestep6, block_caption, mask_bias, runner.get(), image_frames);
    } else {
      // (b f) n d -> (b n) f d
      torch::Tensor over_frames =
          hidden.reshape({batch, frames, patches, dim}).transpose(1, 2).reshape({batch * patches, frames, dim});
      torch::Tensor video = image_frames == 0 ? over_frames : over_frames.narrow(1, 0, video_frames);
      if (i == 1 && temporal_table.defined()) video = video + temporal_table;
      out = layer->forward(video, block_timestep6, {}, {}, runner.get());
      if (image_frames > 0) {
        out = torch::cat({out, over_frames.narrow(1, video_frames, image_frames).to(out.scalar_type())}, 1);
      }
      // (b n) f d -> (b f) n d
      out = out.reshape({batch, patches, frames, dim}).transpose(1, 2).reshape({batch * frames, patches, dim});
    }
    return torch::cat({out, block_payload.to(out.scalar_type())}, 1);
  };
  auto params_of = [parameters](int64_t i) { return parameters[static_cast<size_t>(i)]; };
  torch::Tensor result;
  if (temporal_attention) {
    result = runner_->run_stack(num_blocks(), block, state, params_of);
  } else {
    // Each spatial block under its own index, so the runner (checkpoint policy, full_shard's units) sees the block
    // it knows by that index.
    result = state;
    for (int64_t i = 0; i < num_blocks(); i += 2) {
      result = runner_->run(i, [block, i](const torch::Tensor& input) { return block(i, input); }, result, params_of(i));
    }
  }

  // Output: norm_out modulated by (shift, scale) = scale_shift_table + embedded timestep, proj_out, unpatchify.
  const torch::Tensor hidden = result.narrow(1, 0, patches).reshape({batch, frames * patches, dim});
  const auto shift_scale = (scale_shift_table.unsqueeze(0) + embedded_timestep.unsqueeze(1)).unbind(1);
  const torch::Tensor normed = nn::modulated_layer_norm(hidden, shift_scale[0], shift_scale[1], kOutputNormEps);
  torch::Tensor output = unpatchify(nn::linear(proj_out, normed), batch, frames, grid_height, grid_width);
  return output.to(torch::promote_types(output.scalar_type(), torch::kFloat32));
}

}  // namespace tune::models
