// diffusers' AutoencoderKL (the Stable Diffusion VAE): images in [-1, 1] <-> latents 2^(blocks-1) times smaller.
// Submodule names equal diffusers', so named_parameters() are the tensor names of diffusion_pytorch_model.safetensors:
// encoder.{conv_in, down_blocks.N.{resnets.M, downsamplers.0.conv}, mid_block.{resnets.0/1, attentions.0},
// conv_norm_out, conv_out}, quant_conv, post_quant_conv, decoder.{conv_in, mid_block, up_blocks.N.{resnets.M,
// upsamplers.0.conv}, conv_norm_out, conv_out}.
//
// Who scales the latents: this class does. encode_latents() and encode_frames() return latents already multiplied
// by scaling_factor (after subtracting shift_factor), i.e. what a diffusion model trains on; decode() and
// decode_frames() take such latents and undo the scaling before decoding. encode() and decode_unscaled() are
// diffusers' AutoencoderKL.encode/decode: raw, unscaled latents, for callers that manage the scaling themselves.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/util/Optional.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>

#include <filesystem>
#include <string>

#include "tune/io/weights.h"
#include "tune/models/vae_config.h"
#include "tune/models/vae_layers.h"

namespace tune::models {

// The encoder's diagonal Gaussian posterior over unscaled latents, each [N, latent_channels, h, w].
struct LatentDistribution {
  torch::Tensor mean;
  torch::Tensor logvar;  // clamped to [-30, 20], as diffusers does, so exp() neither underflows nor overflows

  torch::Tensor std() const { return torch::exp(0.5 * logvar); }
  // mean + std * noise with noise ~ N(0, 1) drawn from `generator` (the default generator when absent). A CPU
  // generator may serve a CUDA model: the noise is drawn on the generator's device and moved.
  torch::Tensor sample(c10::optional<at::Generator> generator = c10::nullopt) const;
  torch::Tensor sample_with_noise(const torch::Tensor& noise) const { return mean + std() * noise; }
  // KL divergence to N(0, I), summed over channels and positions: [N] (diffusers' DiagonalGaussianDistribution.kl).
  torch::Tensor kl() const;
};

enum class LatentSampling {
  kSample,  // draw from the posterior (what Stable Diffusion training does)
  kMean,    // the posterior mean (deterministic; diffusers' latent_dist.mode())
};

class AutoencoderKLImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLImpl(const AutoencoderKLConfig& config);

  // images [N, in_channels, H, W] in [-1, 1] -> posterior over unscaled latents [N, latent_channels, H/f, W/f].
  LatentDistribution encode(const torch::Tensor& images);
  // unscaled z [N, latent_channels, h, w] -> images [N, out_channels, h*f, w*f] (post_quant_conv, decoder).
  torch::Tensor decode_unscaled(const torch::Tensor& z);

  // (z - shift_factor) * scaling_factor and its inverse.
  torch::Tensor scale_latents(const torch::Tensor& z) const;
  torch::Tensor unscale_latents(const torch::Tensor& latents) const;

  // images -> scaled latents (sampled or the mean).
  torch::Tensor encode_latents(const torch::Tensor& images, LatentSampling sampling = LatentSampling::kSample,
                               c10::optional<at::Generator> generator = c10::nullopt);
  // scaled latents -> images (divides by scaling_factor, adds shift_factor, decodes).
  torch::Tensor decode(const torch::Tensor& latents);

  // Video: frames [B, F, C, H, W] -> scaled latents [B, F, latent_channels, H/f, W/f], and back. Frames are
  // processed `chunk_size` at a time under NoGradGuard, each chunk moved to the model's device and dtype, and the
  // result stored in the input's device and dtype, so a long CPU video and a GPU VAE need only one chunk's
  // activations on the GPU. With kSample the noise for all frames is drawn at once before the first chunk, so the
  // result does not depend on chunk_size.
  torch::Tensor encode_frames(const torch::Tensor& frames, int64_t chunk_size,
                              LatentSampling sampling = LatentSampling::kSample,
                              c10::optional<at::Generator> generator = c10::nullopt);
  torch::Tensor decode_frames(const torch::Tensor& latents, int64_t chunk_size);

  const AutoencoderKLConfig& config() const { return config_; }
  vae::Encoder& encoder() { return encoder_; }
  vae::Decoder& decoder() { return decoder_; }

 private:
  AutoencoderKLConfig config_;
  vae::Encoder encoder_{nullptr};
  vae::Decoder decoder_{nullptr};
  torch::nn::Conv2d quant_conv_{nullptr};       // null when use_quant_conv is false
  torch::nn::Conv2d post_quant_conv_{nullptr};  // null when use_post_quant_conv is false
};
TORCH_MODULE(AutoencoderKL);

// The pre-0.14 diffusers name of a mid-block attention parameter ("...attentions.0.to_q.weight" ->
// "...attentions.0.query.weight"; to_k -> key, to_v -> value, to_out.0 -> proj_attn), or "" for other names.
std::string legacy_attention_name(const std::string& parameter_name);

// Copies `source` into the model by diffusers name, taking each mid-block attention tensor from its modern name
// or, when only that exists, its legacy name (1x1-conv shaped [C, C, 1, 1] legacy weights are accepted as [C, C]).
// Missing, unexpected or mis-shaped tensors throw tune::InputError naming the weights and tensor. Returns the
// number of tensors loaded.
size_t load_autoencoder_kl_weights(AutoencoderKLImpl& model, const io::WeightSource& source);

// Builds an AutoencoderKL from a diffusers VAE directory: config.json and diffusion_pytorch_model.safetensors
// (or its sharded index). A pipeline directory (model_index.json, no config.json) is read from its vae/ folder.
AutoencoderKL load_autoencoder_kl(const std::filesystem::path& directory);
// Only the config of such a directory (no weights read): the latent geometry, for training on prepared latents.
AutoencoderKLConfig load_autoencoder_kl_config(const std::filesystem::path& directory);

}  // namespace tune::models
