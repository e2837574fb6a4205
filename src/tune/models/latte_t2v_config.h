// Settings of the text-to-video Latte (Latte-1) as diffusers' LatteTransformer3DModel takes them, read from a
// diffusers transformer/config.json. Only the configuration Latte-1 uses is implemented (PixArt-style blocks:
// norm_type "ada_norm_single", tanh-GELU feed-forward, LayerNorms without affine, cross-attention on the projected
// caption); every other value of a key that changes the maths is refused by file and key, never ignored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace tune::models {

// Defaults are Latte-1's (maxin-cn/Latte-1 transformer/config.json). read_latte_t2v_config() gives a key the file
// leaves out diffusers' constructor default instead, as diffusers does.
struct LatteT2VConfig {
  int64_t num_attention_heads = 16;
  int64_t attention_head_dim = 72;
  int64_t in_channels = 4;           // latent channels
  int64_t out_channels = 8;          // 2 * in_channels: noise and the learned variance (learned_sigma)
  int64_t num_layers = 28;           // spatial + temporal block pairs
  int64_t caption_channels = 4096;   // text encoder width (T5-XXL)
  int64_t cross_attention_dim = 1152;  // must equal inner_dim(): the caption is projected to the inner width
  int64_t sample_size = 64;          // latent height = width at training; sets the 2-D sin-cos table's base grid
  int64_t patch_size = 2;
  int64_t video_length = 16;         // frames at training (diffusers' temporal table size); tune accepts any count
  int64_t num_embeds_ada_norm = 1000;  // unused by ada_norm_single; kept as read (0 when the file has null)
  double norm_eps = 1e-6;            // the blocks' LayerNorms (the output norm's eps is always 1e-6, as diffusers')
  bool attention_bias = true;        // biases on to_q / to_k / to_v (to_out.0 always has one)

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  bool learned_sigma() const { return out_channels == 2 * in_channels; }
  // diffusers' PatchEmbed rule for the 2-D table: positions of any grid are rescaled to a base_size grid, divided
  // by interpolation_scale.
  int64_t base_size() const { return sample_size / patch_size; }
  int64_t interpolation_scale() const { return sample_size / 64 > 1 ? sample_size / 64 : 1; }

  // Throws tune::InputError naming `source`, the key, the value and what would be valid.
  void validate(const std::string& source = "LatteT2V config") const;
};

// Reads diffusers' LatteTransformer3DModel config.json. Throws tune::InputError naming the file and the key for a
// malformed file, a missing required key (in_channels, patch_size, caption_channels, cross_attention_dim), and
// every value tune does not implement: _class_name other than LatteTransformer3DModel, norm_type other than
// "ada_norm_single", activation_fn other than "gelu-approximate", norm_elementwise_affine true, dropout other than
// 0, cross_attention_dim other than the inner dim; and non-default values of Transformer2DModel / BasicTransformerBlock
// keys that LatteTransformer3DModel does not take (diffusers would drop them silently; a file setting them describes
// another model): upcast_attention, only_cross_attention, double_self_attention, num_vector_embeds, attention_type,
// positional_embeddings, use_additional_conditions, ff_inner_dim, ff_bias, attention_out_bias, final_dropout.
// Other unknown keys are ignored, as diffusers ignores them.
LatteT2VConfig read_latte_t2v_config(const std::filesystem::path& config_json);

}  // namespace tune::models
