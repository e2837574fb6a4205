// Writing sampled videos and images (see sample_files.h).
#include "tune/recipes/diffusion/sample_files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/data/file_extension.h"
#include "tune/data/image_writer.h"
#include "tune/data/video_writer.h"
#include "tune/io/safetensors.h"

namespace tune::recipes::diffusion_common {

std::filesystem::path numbered_path(const std::filesystem::path& out, int64_t index, int64_t count) {
  if (count == 1) return out;
  auto name = out.stem().string() + "-" + std::to_string(index) + out.extension().string();
  return out.parent_path() / name;
}

void write_video_sample(const std::filesystem::path& path, const torch::Tensor& video, int64_t fps,
                        const std::vector<std::pair<std::string, torch::Tensor>>& extra) {
  if (!path.parent_path().empty()) std::filesystem::create_directories(path.parent_path());
  if (path.extension() == ".safetensors") {
    std::vector<std::pair<std::string, torch::Tensor>> tensors = {{"video", video.to(torch::kFloat32).contiguous()}};
    tensors.insert(tensors.end(), extra.begin(), extra.end());
    io::save_safetensors(path, tensors);
  } else {
    data::write_video(path, video, static_cast<double>(fps));
  }
}

void write_image_sample(const std::filesystem::path& path, const torch::Tensor& image,
                        const std::vector<std::pair<std::string, torch::Tensor>>& extra) {
  if (image.dim() != 3 || image.size(0) != 3 || !image.is_floating_point()) {
    throw Error(fmt::format("{}: an image sample must be float [3, H, W] in [-1, 1], got {} {}", path.string(),
                            std::string(c10::toString(image.scalar_type())), c10::str(image.sizes())));
  }
  // The extension is checked before anything is created, so a typo leaves no empty folder behind.
  const std::string extension = data::lower_extension(path);
  const auto& encoded = data::image_writer_extensions();
  const bool raw = extension == ".safetensors";
  if (!raw && std::find(encoded.begin(), encoded.end(), extension) == encoded.end()) {
    throw UsageError(fmt::format("{}: unknown image sample extension '{}'; tune writes {} and .safetensors (the "
                                 "decoded image as float32, with the final latents)",
                                 path.string(), extension, fmt::join(encoded, " ")));
  }
  if (!path.parent_path().empty()) std::filesystem::create_directories(path.parent_path());
  if (raw) {
    std::vector<std::pair<std::string, torch::Tensor>> tensors = {
        {"image", image.detach().to(torch::kCPU, torch::kFloat32).contiguous()}};
    tensors.insert(tensors.end(), extra.begin(), extra.end());
    io::save_safetensors(path, tensors);
  } else {
    data::write_image(path, image);
  }
}

}  // namespace tune::recipes::diffusion_common
