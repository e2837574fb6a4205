#include "tune/recipes/diffusion/sample_files.h"

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

}  // namespace tune::recipes::diffusion_common
