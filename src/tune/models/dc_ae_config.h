// The settings of diffusers' AutoencoderDC (DC-AE, the deep-compression autoencoder of NVlabs' Sana), read from its
// config.json. Every field the published Sana VAE config uses is read; a value tune does not implement is refused
// by file and field, with what is accepted.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tune::models {

struct AutoencoderDCConfig {
  int64_t in_channels = 3;         // image channels (the decoder's output has as many)
  int64_t latent_channels = 32;
  int64_t attention_head_dim = 32; // EfficientViT blocks: heads = channels / attention_head_dim
  // One entry per stage; a single string in the file means that value for every stage (as diffusers reads it).
  // Block types: "ResBlock" | "EfficientViTBlock".
  std::vector<std::string> encoder_block_types = std::vector<std::string>(6, "ResBlock");
  std::vector<std::string> decoder_block_types = std::vector<std::string>(6, "ResBlock");
  std::vector<int64_t> encoder_block_out_channels = {128, 256, 512, 512, 1024, 1024};
  std::vector<int64_t> decoder_block_out_channels = {128, 256, 512, 512, 1024, 1024};
  std::vector<int64_t> encoder_layers_per_block = {2, 2, 2, 3, 3, 3};  // blocks per stage (> 0 in tune)
  std::vector<int64_t> decoder_layers_per_block = {3, 3, 3, 3, 3, 3};
  // Per stage, the kernel sizes of the extra multi-scale q|k|v projections of its EfficientViT blocks (odd).
  std::vector<std::vector<int64_t>> encoder_qkv_multiscales = {{}, {}, {}, {5}, {5}, {5}};
  std::vector<std::vector<int64_t>> decoder_qkv_multiscales = {{}, {}, {}, {5}, {5}, {5}};
  // "pixel_shuffle": conv to 4x channels then pixel_shuffle; "interpolate": nearest x2 then conv (Sana).
  std::string upsample_block_type = "pixel_shuffle";
  // "pixel_unshuffle": conv to channels/4 then pixel_unshuffle; "Conv": a stride-2 conv (Sana).
  std::string downsample_block_type = "pixel_unshuffle";
  std::vector<std::string> decoder_norm_types = std::vector<std::string>(6, "rms_norm");  // only "rms_norm"
  // The decoder ResBlocks' activation per stage: "silu" (= "swish"), "relu", "gelu", "mish".
  std::vector<std::string> decoder_act_fns = std::vector<std::string>(6, "silu");
  bool encoder_out_shortcut = true;   // encoder output += channel-group means of its input
  bool decoder_in_shortcut = true;    // decoder input conv += the latent channels repeated
  std::string decoder_conv_act_fn = "relu";  // before the decoder's conv_out; same choices as decoder_act_fns
  double scaling_factor = 1.0;        // latents seen by diffusion = z * scaling_factor (Sana: 0.41407)

  // Spatial downscale from images to latents: 2^(stages - 1) (Sana: 32).
  int64_t spatial_compression_ratio() const { return int64_t{1} << (encoder_block_out_channels.size() - 1); }

  // `source` names the file in error messages. Missing fields take diffusers' defaults.
  static AutoencoderDCConfig from_json(const nlohmann::json& json, const std::string& source);
  static AutoencoderDCConfig from_file(const std::string& config_json_path);
};

// "silu", "swish", "relu", "gelu", "mish" (any case, as diffusers' get_activation) -> true.
bool is_supported_dc_ae_activation(const std::string& name);

}  // namespace tune::models
