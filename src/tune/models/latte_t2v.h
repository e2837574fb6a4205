// The text-to-video Latte (Latte-1; Vchitect/Latte models/latte_t2v.py) as diffusers' LatteTransformer3DModel
// computes it: patch tokens of every latent frame (+ a 2-D sin-cos table) pass through num_layers pairs of a spatial
// block (self-attention over a frame's patches, then cross-attention to the projected caption) and a temporal block
// (self-attention over the frames at one patch position; a 1-D sin-cos table added before the first), modulated by
// PixArt's adaLN-single on the timestep, then a final modulated norm, a linear and unpatchify. Parameter names are
// diffusers' state-dict keys (transformer/diffusion_pytorch_model.safetensors loads as is): pos_embed.proj.*,
// transformer_blocks.N.{scale_shift_table, attn1.*, attn2.*, ff.*}, temporal_transformer_blocks.N.{scale_shift_table,
// attn1.*, ff.*}, scale_shift_table, proj_out.*, adaln_single.{emb.timestep_embedder.linear_{1,2}, linear}.*,
// caption_projection.linear_{1,2}.*. The sin-cos tables are computed per call, never stored.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "tune/models/latte_t2v_config.h"
#include "tune/models/latte_t2v_layers.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/patch_embed.h"

namespace tune::models {

class LatteT2VImpl : public torch::nn::Module {
 public:
  // Validates the config (InputError) and initialises with reset_parameters().
  // lora: adapters on the blocks' projections it targets (their lora_A / lora_B under PEFT's names); the base
  // weights are still parameters (the caller freezes them).
  explicit LatteT2VImpl(const LatteT2VConfig& config, const LatteT2VLora& lora = {});
  // Loosely PixArt's initialisation (the model is mostly loaded from files): xavier-uniform Linear weights with
  // zero biases, the patch embedding xavier-uniform on its [D, C*p*p] view, the timestep MLP, adaLN-single linear
  // and caption projection normal(0, 0.02), the scale-shift tables randn / sqrt(D) (diffusers'), the
  // cross-attention output projections and proj_out zero.
  void reset_parameters();

  // x [B, F, C, H, W] latents in tune's layout (diffusers' is [B, C, F, H, W]), any F >= 1, H and W multiples of
  // patch_size; t [B] timesteps (integer or fractional); text [B, L, caption_channels]; text_mask [B, L] (bool or
  // integer, 1 = attend; undefined = every token) becomes the additive bias (1 - mask) * -10000 on the
  // cross-attention scores, as the official code builds it. temporal_attention false skips the temporal blocks
  // (diffusers' enable_temporal_attentions; single images). Returns [B, F, out_channels, H, W], at least float32
  // (an autocast bf16 result is cast up); with learned_sigma the first in_channels channels are the noise
  // prediction, the rest the variance output.
  // Departures from diffusers, where it fails: the temporal table is computed for the input's F (diffusers' has
  // exactly video_length rows) and, as diffusers, not added when F == 1; the 2-D table is computed for the input's
  // H, W with diffusers' base_size / interpolation_scale rule.
  // image_frames n > 0: image-video joint training (the official latte_t2v.py's use_image_num): x's last n frames
  // are images, each with its own caption; text is [B, 1 + n, L, caption_channels] (the video's caption, then each
  // image's) and text_mask [B, 1 + n, L]. The spatial blocks see every frame (an image's row attends to its own
  // caption), the temporal blocks and their table only the F - n video frames (at least 1); the images pass them
  // unchanged. The timestep is the sample's for all its frames, as the official code repeats it. The temporal table
  // is added to the video frames as the official code's checkpointed path does (its plain path skips it when
  // images are joined, unlike training without them).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                        const torch::Tensor& text_mask = {}, bool temporal_attention = true, int64_t image_frames = 0);

  // Blocks for the memory machinery and distributed wrapping, in execution order: spatial 0, temporal 0, spatial 1,
  // ... The stack runs as one run_stack() over a uniform state [B*F, N + P, D]: a frame's N patch tokens, then P
  // payload tokens. The payload carries what every block reads besides the tokens and what must train under
  // checkpointing: the sample's timestep6 (adaln_single's output, 6 rows of D) and projected caption (L rows),
  // 6 + L rows spread over the sample's F frame rows, P = ceil((6 + L) / F) per row, zero-padded at the end. Carried
  // in the state, they are an input of every block, so a recomputing runner returns their gradients (adaln_single
  // and caption_projection train) and full_shard's input hook covers them; each block passes the payload through
  // unchanged. The text mask takes no gradient and is captured by the block functions. A temporal block rearranges
  // (b f) n d -> (b n) f d inside its function (adding the temporal table first when it is block 1) and back. With
  // temporal_attention false, the spatial blocks run one run() each under their own index (no sqrt segments).
  int64_t num_blocks() const { return 2 * config_.num_layers; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() const;
  static bool is_spatial(int64_t block_index) { return block_index % 2 == 0; }
  // Block `block_index`'s type name (distributed.shard_blocks): the names tune's class Latte uses.
  static const char* block_type(int64_t block_index) {
    return is_spatial(block_index) ? "LatteSpatialBlock" : "LatteTemporalBlock";
  }
  void set_block_runner(std::shared_ptr<nn::BlockRunner> runner) { runner_ = std::move(runner); }

  // The 2-D sin-cos table [grid_height * grid_width, D] float64 for a grid of patches (diffusers' PatchEmbed rule).
  torch::Tensor position_table(int64_t grid_height, int64_t grid_width) const;

  const LatteT2VConfig& config() const { return config_; }
  const LatteT2VLora& lora() const { return lora_; }
  bool has_lora() const { return lora_.options.rank > 0; }

  // Submodules under diffusers' names.
  nn::PatchEmbed pos_embed{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};           // LatteT2VBlock with cross-attention
  torch::nn::ModuleList temporal_transformer_blocks{nullptr};  // LatteT2VBlock without
  torch::Tensor scale_shift_table;                             // [2, D]: the output norm's shift, scale (+ t_emb)
  torch::nn::Linear proj_out{nullptr};                         // [D -> p * p * out_channels]
  AdaLayerNormSingle adaln_single{nullptr};
  CaptionProjection caption_projection{nullptr};

 private:
  LatteT2VBlockImpl& block_at(int64_t block_index) const;
  // [B*F, N, p*p*out] -> [B, F, out, H, W]
  torch::Tensor unpatchify(const torch::Tensor& tokens, int64_t batch, int64_t frames, int64_t grid_height,
                           int64_t grid_width) const;

  LatteT2VConfig config_;
  LatteT2VLora lora_;
  std::shared_ptr<nn::BlockRunner> runner_;
};
TORCH_MODULE(LatteT2V);

}  // namespace tune::models
