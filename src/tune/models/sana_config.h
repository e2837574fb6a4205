// Settings of NVlabs' Sana transformer as diffusers' SanaTransformer2DModel takes them, read from a diffusers
// transformer/config.json. The released configurations are implemented (Sana 1.0 600M / 1600M at 512-4096 px,
// Sana 1.5 with qk_norm "rms_norm_across_heads"); every value of a key that changes the maths and that tune does not
// implement (Sana-Sprint's guidance embedding, affine block norms, dropout) is refused by file and key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace tune::models {

// Defaults are diffusers' SanaTransformer2DModel constructor defaults (the 1600M model), which
// read_sana_config() applies to a key the file leaves out, as diffusers does.
struct SanaConfig {
  int64_t in_channels = 32;             // DC-AE latent channels
  int64_t out_channels = 32;            // null in the file: in_channels
  int64_t num_attention_heads = 70;     // linear self-attention heads
  int64_t attention_head_dim = 32;
  int64_t num_layers = 20;
  int64_t num_cross_attention_heads = 20;
  int64_t cross_attention_head_dim = 112;
  int64_t cross_attention_dim = 2240;   // must equal inner_dim(): the caption is projected to the inner width
  int64_t caption_channels = 2304;      // text encoder width (Gemma-2-2B)
  double mlp_ratio = 2.5;               // GLUMBConv hidden = int(mlp_ratio * inner_dim)
  bool attention_bias = false;          // biases on the self-attention's to_q / to_k / to_v
  int64_t sample_size = 32;             // latent size at training; with a position table, its base grid
  int64_t patch_size = 1;
  double norm_eps = 1e-6;               // the blocks' LayerNorms (the output norm's is always 1e-6, as diffusers')
  // null (the 512 / 1024 px models): no position embedding at all. A number (2K: 1.0, 4K: 2.0): diffusers'
  // PatchEmbed 2-D sin-cos table with this interpolation scale.
  std::optional<double> interpolation_scale;
  bool qk_norm = false;                 // qk_norm "rms_norm_across_heads" (Sana 1.5)
  double timestep_scale = 1.0;          // the pipeline multiplies timesteps by it before the model

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t cross_inner_dim() const { return num_cross_attention_heads * cross_attention_head_dim; }
  int64_t base_size() const { return sample_size / patch_size; }

  // Throws tune::InputError naming `source`, the key, the value and what would be valid.
  void validate(const std::string& source = "Sana config") const;
};

// Reads diffusers' SanaTransformer2DModel config.json. Throws tune::InputError naming the file and the key for a
// malformed file, a _class_name other than SanaTransformer2DModel, and every value tune does not implement:
// guidance_embeds true (Sana-Sprint), norm_elementwise_affine true, dropout other than 0, qk_norm other than null or
// "rms_norm_across_heads", cross_attention_dim other than the inner dim. Unknown keys are ignored, as diffusers
// ignores them.
SanaConfig read_sana_config(const std::filesystem::path& config_json);

}  // namespace tune::models
