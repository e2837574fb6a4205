// Video input for the Latte recipe: video files decoded with FFmpeg's libavformat/libavcodec/libswscale, and
// folders of frame images (frame_00000.png, ...) decoded one file at a time through the same libraries.
// Built without FFmpeg (CMake option TUNE_WITH_FFMPEG=OFF or libraries absent), opening throws tune::Error.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tune::data {

// True when this build decodes and encodes video (FFmpeg found at configure time).
bool video_support_available();

// A sequence of RGB frames of one size: a video file or a folder of frame images.
class VideoSource {
 public:
  virtual ~VideoSource() = default;
  virtual const std::filesystem::path& path() const = 0;
  virtual int64_t frame_count() = 0;  // may decode the whole file once (cached) when the header has no count
  virtual double fps() const = 0;     // 0 when unknown
  virtual int64_t width() const = 0;
  virtual int64_t height() const = 0;
  // uint8 [N, H, W, 3] RGB, frames in the order of `indices` (repeats allowed). Throws tune::InputError naming the
  // file when an index lies past the end of the video or a frame cannot be decoded.
  virtual torch::Tensor read_frames(const std::vector<int64_t>& indices) = 0;
};

struct VideoReaderOptions {
  int decoder_threads = 1;  // libavcodec threads per reader; 1 because loaders parallelise across videos
};

// A video file (.mp4 .avi .mkv .webm .gif ... anything libavformat opens) with its best video stream.
// The constructor reads the header; every libav failure is a tune::InputError naming the file and what failed:
// "not a video", "no video stream", "no decoder", "corrupt data at frame N".
class VideoReader : public VideoSource {
 public:
  explicit VideoReader(std::filesystem::path path, VideoReaderOptions options = {});

  const std::filesystem::path& path() const override { return path_; }
  // The container's frame count when it states one, else decoded and counted once (then cached).
  int64_t frame_count() override;
  // Counts frames by decoding the whole stream, ignoring the header (slow; the header can be wrong).
  int64_t count_frames_by_decoding();
  double fps() const override { return fps_; }
  int64_t width() const override { return width_; }
  int64_t height() const override { return height_; }
  const std::string& codec_name() const { return codec_name_; }
  // Decodes from the start up to the largest requested index, keeping only the requested frames.
  torch::Tensor read_frames(const std::vector<int64_t>& indices) override;

 private:
  std::filesystem::path path_;
  VideoReaderOptions options_;
  int64_t header_frame_count_ = 0;  // 0: the container does not say
  int64_t counted_frames_ = -1;     // -1: not counted yet
  double fps_ = 0;
  int64_t width_ = 0;
  int64_t height_ = 0;
  std::string codec_name_;
};

// A folder of frame images (.png .jpg .jpeg .bmp), in sorted file-name order; each frame is one file, decoded
// with FFmpeg's image demuxer, so reading a clip opens only the frames it needs. All frames must share one size.
class FrameFolderReader : public VideoSource {
 public:
  // fps is not stored in a folder: the caller states it (Latte's UCF-101 frames come from 25 fps videos).
  explicit FrameFolderReader(std::filesystem::path folder, double fps = 25.0);

  const std::filesystem::path& path() const override { return folder_; }
  int64_t frame_count() override { return static_cast<int64_t>(frames_.size()); }
  double fps() const override { return fps_; }
  int64_t width() const override { return width_; }
  int64_t height() const override { return height_; }
  const std::vector<std::filesystem::path>& frame_files() const { return frames_; }
  torch::Tensor read_frames(const std::vector<int64_t>& indices) override;

  static bool is_frame_file(const std::filesystem::path& file);  // by extension, case-insensitive
  static bool looks_like_frame_folder(const std::filesystem::path& folder);  // holds at least one frame file

 private:
  std::filesystem::path folder_;
  std::vector<std::filesystem::path> frames_;
  double fps_;
  int64_t width_ = 0;
  int64_t height_ = 0;
};

// A directory becomes a FrameFolderReader, a file a VideoReader.
std::unique_ptr<VideoSource> open_video(const std::filesystem::path& path);

// Decodes one image file (PNG, JPEG, ...) to uint8 [H, W, 3] RGB.
torch::Tensor read_image(const std::filesystem::path& path);

// The extensions of single images that read_image decodes in this build (lower case): .png .jpg .jpeg .bmp, and
// .webp where this FFmpeg has a WebP decoder (it is optional there). Without FFmpeg the list
// stays (so lists of images can be read) and decoding throws.
const std::vector<std::string>& image_file_extensions();

}  // namespace tune::data
