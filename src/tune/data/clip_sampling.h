// Latte's training clip: which frames to take from a video and how to turn them into the model's input, following
// Vchitect/Latte datasets/video_transforms.py (TemporalRandomCrop, RandomHorizontalFlipVideo, UCFCenterCropVideo)
// and datasets/ucf101_datasets.py (np.linspace frame indices), with our portable RNG in place of Python's.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tune::data {

class VideoSource;

struct ClipOptions {
  int64_t num_frames = 16;     // frames per clip (Latte num_frames)
  int64_t frame_interval = 3;  // Latte frame_interval: the clip spans num_frames * frame_interval source frames
  int64_t image_size = 256;    // output height and width
  bool random_flip = true;     // horizontal flip with probability 0.5 (Latte's RandomHorizontalFlipVideo)
};

// Latte's TemporalRandomCrop(span): begin uniform in [0, max(0, total - span - 1)] (Latte never starts at the very
// last possible position), end = min(begin + span, total).
struct TemporalWindow {
  int64_t begin = 0;
  int64_t end = 0;
};
TemporalWindow sample_temporal_window(int64_t total_frames, int64_t span, std::mt19937_64& generator);

// np.linspace(begin, end - 1, num_frames, dtype=int): evenly spread, truncated toward zero, last == end - 1.
std::vector<int64_t> linspace_frame_indices(int64_t begin, int64_t end, int64_t num_frames);

// The source frame indices of one clip. Latte's condition: a video is too short when the window holds fewer than
// num_frames frames, i.e. total_frames < num_frames (a video shorter than num_frames * frame_interval but with at
// least num_frames frames gives a clip spread over the whole video, as in Latte). Too short throws
// tune::InputError naming `source`.
std::vector<int64_t> sample_clip_indices(int64_t total_frames, const ClipOptions& options,
                                         std::mt19937_64& generator, const std::string& source);

// Latte's resize_scale: bilinear (align_corners=false) by the factor image_size / min(H, W), applied as that factor
// (as F.interpolate(scale_factor=...) does), so the short side becomes image_size. float [F, C, H, W].
torch::Tensor resize_short_side(const torch::Tensor& clip, int64_t image_size);
// Latte's center_crop: offsets round((H - size) / 2) with Python's round-half-to-even. float [F, C, H, W].
torch::Tensor center_crop(const torch::Tensor& clip, int64_t size);

// uint8 [F, H, W, 3] -> float [F, 3, size, size] in [-1, 1], in Latte's order: /255, optional flip (last axis),
// resize short side, center crop, (x - 0.5) / 0.5.
torch::Tensor transform_clip(const torch::Tensor& frames, int64_t image_size, bool flip);
// uint8 [F, H, W, 3] -> float [F, 3, height, width] in [-1, 1]: scaled (bilinear) so that the frame covers height x
// width with one side exact, then centre-cropped to it; a square target takes transform_clip's path exactly. For a
// still (a guidance reference) at a sample's size, whatever its aspect ratio.
torch::Tensor transform_frames_to(const torch::Tensor& frames, int64_t height, int64_t width);

// Samples indices, decodes them, draws the flip and transforms: one training clip, float [F, 3, size, size].
torch::Tensor sample_clip(VideoSource& video, const ClipOptions& options, std::mt19937_64& generator);

}  // namespace tune::data
