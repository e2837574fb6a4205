// AutoencoderKL: encoder -> quant_conv -> posterior; post_quant_conv -> decoder; latent scaling; chunked video
// encode/decode; loading diffusers weights (modern and legacy attention names).
#include "tune/models/vae.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "tune/core/error.h"
#include "tune/models/frame_chunks.h"

namespace tune::models {
namespace {

constexpr double kLogvarMin = -30.0;
constexpr double kLogvarMax = 20.0;

void check_images(const torch::Tensor& images, int64_t channels, const char* what) {
  if (images.dim() != 4 || images.size(1) != channels) {
    throw std::invalid_argument(fmt::format("AutoencoderKL: {} must be [N, {}, H, W], got [{}]", what, channels,
                                            fmt::join(images.sizes(), ", ")));
  }
}

}  // namespace

torch::Tensor LatentDistribution::sample(c10::optional<at::Generator> generator) const {
  if (!generator.has_value()) return sample_with_noise(torch::randn_like(mean));
  const auto noise = torch::randn(mean.sizes(), generator, mean.options().device(generator->device()));
  return sample_with_noise(noise.to(mean.device()));
}

torch::Tensor LatentDistribution::kl() const {
  return 0.5 * (mean.pow(2) + torch::exp(logvar) - 1.0 - logvar).sum({1, 2, 3});
}

AutoencoderKLImpl::AutoencoderKLImpl(const AutoencoderKLConfig& config) : config_(config) {
  encoder_ = register_module("encoder", vae::Encoder(config_));
  decoder_ = register_module("decoder", vae::Decoder(config_));
  const int64_t latent = config_.latent_channels;
  if (config_.use_quant_conv) {
    quant_conv_ = register_module("quant_conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2 * latent, 2 * latent, 1)));
  }
  if (config_.use_post_quant_conv) {
    post_quant_conv_ = register_module("post_quant_conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(latent, latent, 1)));
  }
}

LatentDistribution AutoencoderKLImpl::encode(const torch::Tensor& images) {
  check_images(images, config_.in_channels, "images");
  torch::Tensor moments = encoder_(images);
  if (quant_conv_) moments = quant_conv_(moments);
  auto halves = moments.chunk(2, 1);  // channels: [mean | logvar]
  return LatentDistribution{halves[0], halves[1].clamp(kLogvarMin, kLogvarMax)};
}

torch::Tensor AutoencoderKLImpl::decode_unscaled(const torch::Tensor& z) {
  check_images(z, config_.latent_channels, "latents");
  return decoder_(post_quant_conv_ ? post_quant_conv_(z) : z);
}

torch::Tensor AutoencoderKLImpl::scale_latents(const torch::Tensor& z) const {
  return (z - config_.shift_factor) * config_.scaling_factor;
}

torch::Tensor AutoencoderKLImpl::unscale_latents(const torch::Tensor& latents) const {
  return latents / config_.scaling_factor + config_.shift_factor;
}

torch::Tensor AutoencoderKLImpl::encode_latents(const torch::Tensor& images, LatentSampling sampling,
                                                c10::optional<at::Generator> generator) {
  const LatentDistribution posterior = encode(images);
  return scale_latents(sampling == LatentSampling::kMean ? posterior.mean : posterior.sample(std::move(generator)));
}

torch::Tensor AutoencoderKLImpl::decode(const torch::Tensor& latents) { return decode_unscaled(unscale_latents(latents)); }

torch::Tensor AutoencoderKLImpl::encode_frames(const torch::Tensor& frames, int64_t chunk_size, LatentSampling sampling,
                                               c10::optional<at::Generator> generator) {
  check_frames(frames, config_.in_channels, chunk_size, "AutoencoderKL", "frames");
  torch::NoGradGuard no_grad;
  const int64_t batch = frames.size(0), count = frames.size(1);
  const auto flat = frames.reshape({batch * count, frames.size(2), frames.size(3), frames.size(4)});
  const torch::Tensor parameter = first_parameter(*this);
  torch::Tensor noise;  // all frames' noise, drawn once so that chunking does not change the draw
  auto latents = run_in_chunks(flat, chunk_size, parameter, [&](const torch::Tensor& chunk, int64_t begin, int64_t end) {
    const LatentDistribution posterior = encode(chunk);
    if (sampling == LatentSampling::kMean) return scale_latents(posterior.mean);
    if (!noise.defined()) {
      std::vector<int64_t> shape = posterior.mean.sizes().vec();
      shape[0] = flat.size(0);
      const auto device = generator.has_value() ? generator->device() : posterior.mean.device();
      noise = torch::randn(shape, generator, posterior.mean.options().device(device));
    }
    return scale_latents(posterior.sample_with_noise(noise.slice(0, begin, end).to(posterior.mean.device())));
  });
  return latents.reshape({batch, count, latents.size(1), latents.size(2), latents.size(3)});
}

torch::Tensor AutoencoderKLImpl::decode_frames(const torch::Tensor& latents, int64_t chunk_size) {
  check_frames(latents, config_.latent_channels, chunk_size, "AutoencoderKL", "latents");
  torch::NoGradGuard no_grad;
  const int64_t batch = latents.size(0), count = latents.size(1);
  const auto flat = latents.reshape({batch * count, latents.size(2), latents.size(3), latents.size(4)});
  auto images = run_in_chunks(flat, chunk_size, first_parameter(*this),
                              [&](const torch::Tensor& chunk, int64_t, int64_t) { return decode(chunk); });
  return images.reshape({batch, count, images.size(1), images.size(2), images.size(3)});
}

std::string legacy_attention_name(const std::string& parameter_name) {
  static const std::pair<const char*, const char*> kRenames[] = {
      {".attentions.0.to_q.", ".attentions.0.query."},
      {".attentions.0.to_k.", ".attentions.0.key."},
      {".attentions.0.to_v.", ".attentions.0.value."},
      {".attentions.0.to_out.0.", ".attentions.0.proj_attn."},
  };
  for (const auto& [modern, legacy] : kRenames) {
    const auto position = parameter_name.find(modern);
    if (position != std::string::npos) {
      return parameter_name.substr(0, position) + legacy + parameter_name.substr(position + std::string(modern).size());
    }
  }
  return "";
}

size_t load_autoencoder_kl_weights(AutoencoderKLImpl& model, const io::WeightSource& source) {
  struct LegacyTensor {
    std::string file_name;
    torch::Tensor parameter;
  };
  std::vector<LegacyTensor> legacy;
  std::vector<std::string> problems;
  io::LoadOptions options;
  // Parameters absent under their modern name but present under the legacy one are taken out of
  // load_into_module's checks (by their full names) and copied here; everything else goes through it.
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (source.contains(name)) continue;
    const std::string old_name = legacy_attention_name(name);
    if (old_name.empty() || !source.contains(old_name)) continue;  // load_into_module reports it as missing
    const io::SafetensorsFile& file = source.file_of(old_name);
    const io::TensorEntry& entry = file.entries().at(old_name);
    std::vector<int64_t> expected = item.value().sizes().vec();
    std::vector<int64_t> as_conv = expected;
    as_conv.insert(as_conv.end(), {1, 1});
    if (entry.shape != expected && !(expected.size() == 2 && entry.shape == as_conv)) {
      problems.push_back(fmt::format("{}: tensor '{}' (legacy name of '{}') has shape [{}], the model expects [{}]",
                                     file.path().string(), old_name, name, fmt::join(entry.shape, ", "),
                                     fmt::join(expected, ", ")));
      continue;
    }
    if (!c10::isFloatingType(entry.dtype)) {
      problems.push_back(fmt::format("{}: tensor '{}' (legacy name of '{}') is not floating point",
                                     file.path().string(), old_name, name));
      continue;
    }
    options.ignore_missing_containing.push_back(name);
    options.ignore_unexpected_containing.push_back(old_name);
    legacy.push_back({old_name, item.value()});
  }
  if (!problems.empty()) throw InputError(fmt::format("{}", fmt::join(problems, "\n")));

  const size_t loaded = io::load_into_module(model, source, options);
  torch::NoGradGuard no_grad;
  for (LegacyTensor& tensor : legacy) {
    const torch::Tensor value = source.load(tensor.file_name);
    io::require_finite(value, source.file_of(tensor.file_name).path(), tensor.file_name);
    tensor.parameter.copy_(value.reshape(tensor.parameter.sizes()));
  }
  return loaded + legacy.size();
}

namespace {

std::filesystem::path vae_directory_of(const std::filesystem::path& directory) {
  if (!std::filesystem::exists(directory / "config.json") && std::filesystem::exists(directory / "vae" / "config.json")) {
    return directory / "vae";  // a diffusers pipeline: the VAE is its vae/ component
  }
  return directory;
}

}  // namespace

AutoencoderKLConfig load_autoencoder_kl_config(const std::filesystem::path& directory) {
  return AutoencoderKLConfig::from_file((vae_directory_of(directory) / "config.json").string());
}

AutoencoderKL load_autoencoder_kl(const std::filesystem::path& directory) {
  const std::filesystem::path vae_directory = vae_directory_of(directory);
  const auto config = AutoencoderKLConfig::from_file((vae_directory / "config.json").string());
  AutoencoderKL model(config);
  const auto source = io::WeightSource::open_directory(vae_directory, "diffusion_pytorch_model.safetensors",
                                                       "diffusion_pytorch_model.safetensors.index.json");
  load_autoencoder_kl_weights(*model, source);
  model->eval();
  return model;
}

}  // namespace tune::models
