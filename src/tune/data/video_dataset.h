// Datasets for the Latte recipes: videos in UCF-101 layout (root/<class>/<video file or frame folder>) or an
// explicit list (captioned videos), each read as one random training clip, and precomputed VAE latents (one
// safetensors file per video) for training without running the VAE.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tune/data/clip_sampling.h"

namespace tune::data {

enum class OnBadVideo { fail, skip };
OnBadVideo parse_on_bad_video(const std::string& value);  // "fail" | "skip"; UsageError otherwise

// The names of skipped items, shared by a dataset's copies and safe to update from loader threads.
class SkipRecord {
 public:
  bool contains(int64_t index) const;
  // Records and logs (warn) one skip; returns the number skipped so far.
  int64_t add(int64_t index, const std::string& name, const std::string& reason);
  int64_t count() const;
  std::vector<std::string> names() const;  // in the order skipped

 private:
  mutable std::mutex mutex_;
  std::set<int64_t> indices_;
  std::vector<std::string> names_;
};

struct VideoDatasetOptions {
  ClipOptions clip;                          // frames, interval, size and flip of each clip
  OnBadVideo on_bad_video = OnBadVideo::fail;  // skip: log and count the video, then use the next readable one
  double frame_folder_fps = 25.0;            // fps reported for frame folders (UCF-101 is 25 fps)
  bool cache_frames = false;                 // keep every decoded video in memory (small datasets): each video is
                                             // decoded once, clips (crop, flip) are still drawn afresh each time
};

struct VideoExample {
  torch::Tensor video;  // float [F, 3, image_size, image_size] in [-1, 1]
  int64_t label = 0;    // index of the class folder in sorted order (0 for an explicit list)
  int64_t index = 0;    // the item actually used (differs from the one asked for when bad ones were skipped)
};

class VideoDataset {
 public:
  // Files whose extension (any case) is one of video_extensions() and sub-folders holding frame images are
  // videos; other files are ignored (counted in the log). Throws tune::InputError naming the root when it is not
  // a directory, has no class folder, or holds no video.
  VideoDataset(std::filesystem::path root, VideoDatasetOptions options);
  // An explicit list (captioned videos, captioned_videos.h): each path a video file or frame folder, label 0, no
  // classes; item i is videos[i], so a caller maps VideoExample::index back to its own record. `source` (the JSONL
  // file or folder the list came from) names the dataset in messages. Throws tune::InputError when `videos` is empty.
  VideoDataset(std::vector<std::filesystem::path> videos, std::filesystem::path source, VideoDatasetOptions options);

  static const std::vector<std::string>& video_extensions();  // .mp4 .avi .mkv .webm .gif .mov

  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::filesystem::path& item_path(int64_t index) const;
  int64_t item_label(int64_t index) const;

  // One random clip of video `index` (or, with on_bad_video = skip, of the next readable video after it: the bad
  // ones are logged, counted and never used again). With fail, a bad video throws tune::InputError naming it.
  VideoExample get(int64_t index, std::mt19937_64& generator) const;

  int64_t skipped_count() const { return skipped_->count(); }
  std::vector<std::string> skipped() const { return skipped_->names(); }

 private:
  struct Item {
    std::filesystem::path path;
    int64_t label;
  };
  std::filesystem::path root_;  // the class-folder root, or the explicit list's source
  VideoDatasetOptions options_;
  std::vector<std::string> classes_;
  std::vector<Item> items_;
  std::shared_ptr<SkipRecord> skipped_ = std::make_shared<SkipRecord>();
  struct FrameCache;                          // decoded uint8 frames per video index (cache_frames)
  std::shared_ptr<FrameCache> frame_cache_;
};

struct LatentExample {
  torch::Tensor latent;  // [F, C, h, w] as stored (dtype of the file)
  int64_t label = 0;
  int64_t index = 0;
};

// Every *.safetensors file under `root` (recursively, sorted by path) holds tensor "latent" [F, C, h, w] and
// "label" (int64, one element). Files are opened when read; a missing or mis-shaped tensor is a tune::InputError
// naming the file (or, with skip, a logged and counted skip).
class LatentDataset {
 public:
  explicit LatentDataset(std::filesystem::path root, OnBadVideo on_bad_file = OnBadVideo::fail);

  int64_t size() const { return static_cast<int64_t>(files_.size()); }
  const std::filesystem::path& item_path(int64_t index) const;
  LatentExample get(int64_t index) const;

  int64_t skipped_count() const { return skipped_->count(); }
  std::vector<std::string> skipped() const { return skipped_->names(); }

 private:
  std::filesystem::path root_;
  OnBadVideo on_bad_file_;
  std::vector<std::filesystem::path> files_;
  std::shared_ptr<SkipRecord> skipped_ = std::make_shared<SkipRecord>();
};

// Writes one LatentDataset file ("latent" as given, "label" int64 [1]) atomically.
void save_latent(const std::filesystem::path& path, const torch::Tensor& latent, int64_t label);

}  // namespace tune::data
