// Still-image output for text-to-image samples: .png (FFmpeg's png encoder, lossless RGB24) and .jpg/.jpeg (mjpeg,
// full-range 4:4:4, high quality), chosen by the file extension. Written to "<path>.tmp" and renamed when complete,
// as video_writer does, so an interrupted run never leaves a truncated image under the final name.
#pragma once

#include <torch/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace tune::data {

// The extensions write_image accepts: .png .jpg .jpeg.
const std::vector<std::string>& image_writer_extensions();

// uint8 [H, W, 3] passes through; float [3, H, W] in [-1, 1] (the VAE's range) becomes round((x + 1) * 127.5)
// clamped to [0, 255], exactly as frames_to_uint8 does for video frames. Anything else throws tune::Error naming
// the shape and dtype.
torch::Tensor image_to_uint8(const torch::Tensor& image);

struct ImageWriterOptions {
  int jpeg_quality = 1;  // mjpeg quantiser scale, 1 (best) .. 31; 1 measured as Pillow quality 95 (4:4:4) does
};

// Writes one image in either layout accepted by image_to_uint8. Any size works for both formats (4:4:4 JPEG has no
// even-size constraint). Throws tune::UsageError for an unknown extension (listing the accepted ones), tune::Error
// for encoder or file failures and for a build without FFmpeg, each naming the file. Creates nothing at `path`
// unless the whole file was written.
void write_image(const std::filesystem::path& path, const torch::Tensor& image, ImageWriterOptions options = {});

}  // namespace tune::data
