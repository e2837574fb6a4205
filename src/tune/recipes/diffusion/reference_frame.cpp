// Reading the reference frame of gradient-guided sampling.
#include "tune/recipes/diffusion/reference_frame.h"

#include "tune/data/clip_sampling.h"
#include "tune/data/video_reader.h"

namespace tune::recipes::diffusion_common {

torch::Tensor read_reference_pixels(const std::filesystem::path& path, int64_t height, int64_t width) {
  torch::Tensor frame;  // uint8 [1, H, W, 3]
  if (data::FrameFolderReader::is_frame_file(path)) {
    frame = data::read_image(path).unsqueeze(0);
  } else {
    frame = data::open_video(path)->read_frames({0});
  }
  return data::transform_frames_to(frame, height, width);
}

}  // namespace tune::recipes::diffusion_common
