// diffusers' AutoencoderDC (DC-AE), the VAE of NVlabs' Sana: images in [-1, 1] <-> latents 2^(stages-1) times
// smaller (Sana: 32x, 32 channels). Submodule names equal diffusers' (see dc_ae_layers.h), so named_parameters()
// are the tensor names of its diffusion_pytorch_model.safetensors and load strictly.
//
// The API follows AutoencoderKL's (vae.h) so the diffusion recipes can use either. Who scales the latents: this
// class does. encode_latents()/encode_frames() return z * scaling_factor, what a diffusion model trains on;
// decode()/decode_frames() take such latents and divide first. encode() and decode_unscaled() are diffusers'
// AutoencoderDC.encode/decode on raw latents. DC-AE's encoder is deterministic (no posterior to sample).
//
// Tiling (off by default, as in diffusers): with set_tiling(), images or latents larger than one tile are processed
// as overlapping tiles of tile_sample_min pixels (tile_sample_min / ratio latents) every tile_sample_stride pixels,
// the overlaps blended linearly, as diffusers' AutoencoderDC.tiled_encode/tiled_decode do (same tile grid, same
// blend weights), so only one tile's activations are alive at a time. Attention and convolutions then see one tile,
// so the result differs from the untiled one near tile borders, as diffusers' does.
#pragma once

#include <torch/nn/module.h>

#include <filesystem>

#include "tune/io/weights.h"
#include "tune/models/dc_ae_config.h"
#include "tune/models/dc_ae_layers.h"

namespace tune::models {

struct DCAETiling {
  bool enabled = false;
  int64_t tile_sample_min_height = 512;   // pixels; diffusers' defaults
  int64_t tile_sample_min_width = 512;
  int64_t tile_sample_stride_height = 448;  // tiles overlap by min - stride pixels (64), blended
  int64_t tile_sample_stride_width = 448;
};

class AutoencoderDCImpl : public torch::nn::Module {
 public:
  explicit AutoencoderDCImpl(const AutoencoderDCConfig& config);

  // images [N, in_channels, H, W] (H, W multiples of the compression ratio) -> unscaled latents [N, C, H/f, W/f];
  // tiled when tiling is enabled and the images exceed a tile.
  torch::Tensor encode(const torch::Tensor& images);
  // unscaled latents -> images [N, in_channels, h*f, w*f]; tiled when tiling is enabled and the latents exceed a tile.
  torch::Tensor decode_unscaled(const torch::Tensor& z);

  torch::Tensor scale_latents(const torch::Tensor& z) const { return z * config_.scaling_factor; }
  torch::Tensor unscale_latents(const torch::Tensor& latents) const { return latents / config_.scaling_factor; }

  torch::Tensor encode_latents(const torch::Tensor& images) { return scale_latents(encode(images)); }
  torch::Tensor decode(const torch::Tensor& latents) { return decode_unscaled(unscale_latents(latents)); }

  // Video or image batches: frames [B, F, C, H, W] -> scaled latents [B, F, latent_channels, H/f, W/f] and back,
  // `chunk_size` frames at a time under NoGradGuard, each chunk moved to the model's device and dtype and the
  // result stored in the input's device and dtype.
  torch::Tensor encode_frames(const torch::Tensor& frames, int64_t chunk_size);
  torch::Tensor decode_frames(const torch::Tensor& latents, int64_t chunk_size);

  // When enabled, tile sizes and strides must be positive multiples of the compression ratio, strides at most the
  // sizes (so tiles cover the input and keep whole latents); throws std::invalid_argument otherwise.
  void set_tiling(const DCAETiling& tiling);
  const DCAETiling& tiling() const { return tiling_; }

  const AutoencoderDCConfig& config() const { return config_; }
  dc_ae::Encoder& encoder() { return encoder_; }
  dc_ae::Decoder& decoder() { return decoder_; }

 private:
  AutoencoderDCConfig config_;
  DCAETiling tiling_;
  dc_ae::Encoder encoder_{nullptr};
  dc_ae::Decoder decoder_{nullptr};
};
TORCH_MODULE(AutoencoderDC);

// Copies `source` into the model by diffusers' names; missing, unexpected or mis-shaped tensors throw
// tune::InputError naming the weights and the tensor. Returns the number of tensors loaded.
size_t load_autoencoder_dc_weights(AutoencoderDCImpl& model, const io::WeightSource& source);

// Builds an AutoencoderDC from a diffusers VAE directory: config.json and diffusion_pytorch_model.safetensors (or
// its sharded index). A pipeline directory (model_index.json, no config.json) is read from its vae/ folder.
AutoencoderDC load_autoencoder_dc(const std::filesystem::path& directory);
AutoencoderDCConfig load_autoencoder_dc_config(const std::filesystem::path& directory);

}  // namespace tune::models
