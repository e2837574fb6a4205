// The settings of diffusers' AutoencoderKL (the Stable Diffusion VAE), read from and written to its config.json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tune::models {

struct AutoencoderKLConfig {
  int64_t in_channels = 3;                          // image channels
  int64_t out_channels = 3;
  int64_t latent_channels = 4;
  std::vector<int64_t> block_out_channels = {64};   // one entry per down/up block; SD: [128, 256, 512, 512]
  // Only "DownEncoderBlock2D" / "UpDecoderBlock2D", one per entry of block_out_channels.
  std::vector<std::string> down_block_types = {"DownEncoderBlock2D"};
  std::vector<std::string> up_block_types = {"UpDecoderBlock2D"};
  int64_t layers_per_block = 1;                     // resnets per encoder block; decoder blocks have one more
  int64_t norm_num_groups = 32;                     // GroupNorm groups everywhere (eps fixed at 1e-6)
  std::string act_fn = "silu";                      // the only activation implemented
  int64_t sample_size = 32;                         // training resolution; informational
  double scaling_factor = 0.18215;                  // latents seen by diffusion = (z - shift_factor) * scaling_factor
  double shift_factor = 0.0;                        // null/absent in SD 1.x/2.x/SDXL configs; set in SD3/Flux VAEs
  // Whether diffusers runs this VAE in fp32 even in fp16 pipelines. Accepted and written back but not acted on:
  // in tune the precision is the recipe's runtime choice (mixed_precision / param_dtype), never a model flag.
  bool force_upcast = true;
  bool use_quant_conv = true;                       // 1x1 conv on the encoder output (false in SD3/Flux)
  bool use_post_quant_conv = true;                  // 1x1 conv before the decoder
  bool mid_block_add_attention = true;              // the mid blocks' self-attention (all standard VAEs have it)

  // Spatial downscale from images to latents: 2^(number of blocks - 1).
  int64_t downscale_factor() const { return int64_t{1} << (block_out_channels.size() - 1); }

  // `source` names the file in error messages. Missing fields take diffusers' defaults; unsupported values
  // (a block type other than the standard two, act_fn other than silu, groups not dividing channels, list
  // lengths that disagree) throw tune::InputError naming the file and field.
  static AutoencoderKLConfig from_json(const nlohmann::json& json, const std::string& source);
  static AutoencoderKLConfig from_file(const std::string& config_json_path);
  nlohmann::json to_json() const;
};

}  // namespace tune::models
