// AutoencoderDC: encoder/decoder, latent scaling, chunked video helpers, diffusers-compatible tiling, and
// strict loading of diffusers' weights.
#include "tune/models/dc_ae.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "tune/models/frame_chunks.h"

namespace tune::models {
namespace {

void check_images(const torch::Tensor& images, int64_t channels, const char* what) {
  if (images.dim() != 4 || images.size(1) != channels) {
    throw std::invalid_argument(fmt::format("AutoencoderDC: {} must be [N, {}, H, W], got [{}]", what, channels,
                                            fmt::join(images.sizes(), ", ")));
  }
}

// Cross-fades the first `extent` rows (dim 2) or columns (dim 3) of `tile` from the last `extent` of its finished
// neighbour `previous` (above or to the left) into its own: weight t = i/extent on the tile's own value. The
// weights are formed in double and rounded to fp32 once, and the mix is computed in fp32, as diffusers' per-line
// Python-scalar loop does (for fp32 tiles, bit for bit).
void blend_from(const torch::Tensor& previous, torch::Tensor& tile, int64_t dim, int64_t extent) {
  extent = std::min({previous.size(dim), tile.size(dim), extent});
  if (extent <= 0) return;
  std::vector<int64_t> shape(4, 1);
  shape[dim] = extent;
  const auto own64 = (torch::arange(extent, torch::kFloat64) / static_cast<double>(extent)).reshape(shape);
  const auto fp32_on_device = torch::TensorOptions().dtype(torch::kFloat32).device(tile.device());
  const auto own = own64.to(fp32_on_device);
  const auto theirs = (1.0 - own64).to(fp32_on_device);
  const auto mine = tile.narrow(dim, 0, extent);
  const auto other = previous.narrow(dim, previous.size(dim) - extent, extent);
  mine.copy_(other.to(torch::kFloat32) * theirs + mine.to(torch::kFloat32) * own);
}

// Per axis (height, width): input tile size and step, and in the output the blended and the kept lines per tile.
struct TileGrid {
  int64_t tile_h, tile_w, step_h, step_w, blend_h, blend_w, keep_h, keep_w;
};

// Runs `code` on overlapping tiles of `input` in raster order; each output tile is blended with its finished upper
// and left neighbours, then its first keep_h x keep_w pixels are kept. Only the previous row of finished tiles is
// alive, so memory is one tile's activations plus one row of tiles.
template <typename Code>
torch::Tensor run_tiled(const torch::Tensor& input, const TileGrid& grid, Code code) {
  std::vector<torch::Tensor> previous_row, rows;
  for (int64_t top = 0; top < input.size(2); top += grid.step_h) {
    std::vector<torch::Tensor> row, kept;
    for (int64_t left = 0; left < input.size(3); left += grid.step_w) {
      torch::Tensor tile = code(input.slice(2, top, std::min(top + grid.tile_h, input.size(2)))
                                    .slice(3, left, std::min(left + grid.tile_w, input.size(3))));
      const size_t column = row.size();
      if (!previous_row.empty()) blend_from(previous_row[column], tile, 2, grid.blend_h);
      if (column > 0) blend_from(row.back(), tile, 3, grid.blend_w);
      kept.push_back(tile.slice(2, 0, grid.keep_h).slice(3, 0, grid.keep_w));
      row.push_back(tile);
    }
    rows.push_back(torch::cat(kept, 3));
    previous_row = std::move(row);
  }
  return torch::cat(rows, 2);
}

}  // namespace

AutoencoderDCImpl::AutoencoderDCImpl(const AutoencoderDCConfig& config) : config_(config) {
  encoder_ = register_module("encoder", dc_ae::Encoder(config_));
  decoder_ = register_module("decoder", dc_ae::Decoder(config_));
}

torch::Tensor AutoencoderDCImpl::encode(const torch::Tensor& images) {
  check_images(images, config_.in_channels, "images");
  const int64_t ratio = config_.spatial_compression_ratio();
  if (images.size(2) % ratio != 0 || images.size(3) % ratio != 0) {
    throw std::invalid_argument(fmt::format("AutoencoderDC: image size {}x{} is not a multiple of the compression "
                                            "ratio {}", images.size(2), images.size(3), ratio));
  }
  if (tiling_.enabled && (images.size(2) > tiling_.tile_sample_min_height ||
                          images.size(3) > tiling_.tile_sample_min_width)) {
    // Latent tiles overlap by (tile - stride) / ratio latents, blended; each keeps stride / ratio latents.
    const TileGrid grid{tiling_.tile_sample_min_height, tiling_.tile_sample_min_width,
                        tiling_.tile_sample_stride_height, tiling_.tile_sample_stride_width,
                        (tiling_.tile_sample_min_height - tiling_.tile_sample_stride_height) / ratio,
                        (tiling_.tile_sample_min_width - tiling_.tile_sample_stride_width) / ratio,
                        tiling_.tile_sample_stride_height / ratio, tiling_.tile_sample_stride_width / ratio};
    return run_tiled(images, grid, [&](const torch::Tensor& tile) { return encoder_(tile); });
  }
  return encoder_(images);
}

torch::Tensor AutoencoderDCImpl::decode_unscaled(const torch::Tensor& z) {
  check_images(z, config_.latent_channels, "latents");
  const int64_t ratio = config_.spatial_compression_ratio();
  if (tiling_.enabled && (z.size(2) > tiling_.tile_sample_min_height / ratio ||
                          z.size(3) > tiling_.tile_sample_min_width / ratio)) {
    // Image tiles overlap by tile - stride pixels, blended; each keeps stride pixels.
    const TileGrid grid{tiling_.tile_sample_min_height / ratio, tiling_.tile_sample_min_width / ratio,
                        tiling_.tile_sample_stride_height / ratio, tiling_.tile_sample_stride_width / ratio,
                        tiling_.tile_sample_min_height - tiling_.tile_sample_stride_height,
                        tiling_.tile_sample_min_width - tiling_.tile_sample_stride_width,
                        tiling_.tile_sample_stride_height, tiling_.tile_sample_stride_width};
    return run_tiled(z, grid, [&](const torch::Tensor& tile) { return decoder_(tile); });
  }
  return decoder_(z);
}

void AutoencoderDCImpl::set_tiling(const DCAETiling& tiling) {
  if (!tiling.enabled) {  // sizes unused: nothing to check
    tiling_ = tiling;
    return;
  }
  const int64_t ratio = config_.spatial_compression_ratio();
  const auto check = [&](int64_t size, int64_t stride, const char* axis) {
    if (size <= 0 || size % ratio != 0 || stride <= 0 || stride % ratio != 0 || stride > size) {
      throw std::invalid_argument(fmt::format(
          "AutoencoderDC tiling: tile {} {} with stride {} must be positive multiples of the compression ratio {} "
          "with stride <= tile size", axis, size, stride, ratio));
    }
  };
  check(tiling.tile_sample_min_height, tiling.tile_sample_stride_height, "height");
  check(tiling.tile_sample_min_width, tiling.tile_sample_stride_width, "width");
  tiling_ = tiling;
}

torch::Tensor AutoencoderDCImpl::encode_frames(const torch::Tensor& frames, int64_t chunk_size) {
  check_frames(frames, config_.in_channels, chunk_size, "AutoencoderDC", "frames");
  torch::NoGradGuard no_grad;
  const int64_t batch = frames.size(0), count = frames.size(1);
  const auto flat = frames.reshape({batch * count, frames.size(2), frames.size(3), frames.size(4)});
  auto latents = run_in_chunks(flat, chunk_size, first_parameter(*this),
                               [&](const torch::Tensor& chunk, int64_t, int64_t) { return encode_latents(chunk); });
  return latents.reshape({batch, count, latents.size(1), latents.size(2), latents.size(3)});
}

torch::Tensor AutoencoderDCImpl::decode_frames(const torch::Tensor& latents, int64_t chunk_size) {
  check_frames(latents, config_.latent_channels, chunk_size, "AutoencoderDC", "latents");
  torch::NoGradGuard no_grad;
  const int64_t batch = latents.size(0), count = latents.size(1);
  const auto flat = latents.reshape({batch * count, latents.size(2), latents.size(3), latents.size(4)});
  auto images = run_in_chunks(flat, chunk_size, first_parameter(*this),
                              [&](const torch::Tensor& chunk, int64_t, int64_t) { return decode(chunk); });
  return images.reshape({batch, count, images.size(1), images.size(2), images.size(3)});
}

size_t load_autoencoder_dc_weights(AutoencoderDCImpl& model, const io::WeightSource& source) {
  return io::load_into_module(model, source);
}

namespace {

std::filesystem::path vae_directory_of(const std::filesystem::path& directory) {
  if (!std::filesystem::exists(directory / "config.json") &&
      std::filesystem::exists(directory / "vae" / "config.json")) {
    return directory / "vae";  // a diffusers pipeline: the VAE is its vae/ component
  }
  return directory;
}

}  // namespace

AutoencoderDCConfig load_autoencoder_dc_config(const std::filesystem::path& directory) {
  return AutoencoderDCConfig::from_file((vae_directory_of(directory) / "config.json").string());
}

AutoencoderDC load_autoencoder_dc(const std::filesystem::path& directory) {
  const std::filesystem::path vae_directory = vae_directory_of(directory);
  AutoencoderDC model(AutoencoderDCConfig::from_file((vae_directory / "config.json").string()));
  const auto source = io::WeightSource::open_directory(vae_directory, "diffusion_pytorch_model.safetensors",
                                                       "diffusion_pytorch_model.safetensors.index.json");
  load_autoencoder_dc_weights(*model, source);
  model->eval();
  return model;
}

}  // namespace tune::models
