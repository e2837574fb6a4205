// Video output for Latte samples: .mp4 (H.264 through libx264 when this FFmpeg has it, else MPEG-4 part 2) and
// .gif (a fixed 252-colour palette), chosen by the file extension. Written to "<path>.tmp" and renamed when complete.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace tune::data {

// The encoder .mp4 files get in this build: "libx264" or "mpeg4" ("" without FFmpeg).
std::string mp4_encoder_name();

// uint8 [F, H, W, 3] passes through; float [F, 3, H, W] in [-1, 1] (the model's layout) becomes
// round((x + 1) * 127.5) clamped to [0, 255]. Anything else throws tune::Error naming the shape and dtype.
torch::Tensor frames_to_uint8(const torch::Tensor& frames);

struct VideoWriterOptions {
  double fps = 8.0;     // frames per second (Latte samples are saved at 8)
  int mp4_crf = 18;     // libx264 constant rate factor (lower: better); mpeg4 uses an equivalent fixed quantiser
};

// Streams frames into a video file. Nothing appears at `path` until finish(); a writer destroyed before finish()
// removes its temporary file.
class VideoWriter {
 public:
  // Throws tune::UsageError for an unknown extension (listing .mp4 and .gif) or odd sizes for .mp4 (yuv420p needs
  // even width and height), tune::Error for encoder failures, both naming the file.
  VideoWriter(std::filesystem::path path, int64_t width, int64_t height, VideoWriterOptions options = {});
  ~VideoWriter();
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  // Appends frames in either layout accepted by frames_to_uint8; their size must match the constructor's.
  void write(const torch::Tensor& frames);
  // Flushes the encoder, writes the trailer and renames the temporary file to `path`.
  void finish();
  int64_t frames_written() const { return frames_written_; }

 private:
  struct State;
  std::filesystem::path path_;
  std::filesystem::path temporary_path_;
  int64_t width_;
  int64_t height_;
  int64_t frames_written_ = 0;
  std::unique_ptr<State> state_;
};

// Writes a whole clip in one call.
void write_video(const std::filesystem::path& path, const torch::Tensor& frames, double fps = 8.0);

}  // namespace tune::data
