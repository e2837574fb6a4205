// Video and latent datasets in UCF-101 layout (see video_dataset.h).
#include <numeric>
#include <map>
#include <mutex>
#include "tune/data/video_dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/video_reader.h"
#include "tune/io/safetensors.h"

#include "tune/data/file_extension.h"

namespace tune::data {

namespace fs = std::filesystem;

namespace {


void check_index(int64_t index, int64_t size, const fs::path& root) {
  if (index < 0 || index >= size) {
    throw Error(fmt::format("{}: item {} is out of range (the dataset has {})", root.string(), index, size));
  }
}

}  // namespace

OnBadVideo parse_on_bad_video(const std::string& value) {
  if (value == "fail") return OnBadVideo::fail;
  if (value == "skip") return OnBadVideo::skip;
  throw UsageError(fmt::format("on_bad_video must be 'fail' or 'skip', got '{}'", value));
}

// ---------------------------------------------------------------------------------------------------------------
// SkipRecord

bool SkipRecord::contains(int64_t index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return indices_.count(index) != 0;
}

int64_t SkipRecord::add(int64_t index, const std::string& name, const std::string& reason) {
  int64_t count = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!indices_.insert(index).second) return static_cast<int64_t>(names_.size());
    names_.push_back(name);
    count = static_cast<int64_t>(names_.size());
  }
  log::warn("skipping {} ({} skipped so far): {}", name, count, reason);
  return count;
}

int64_t SkipRecord::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(names_.size());
}

std::vector<std::string> SkipRecord::names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return names_;
}

// ---------------------------------------------------------------------------------------------------------------
// VideoDataset

const std::vector<std::string>& VideoDataset::video_extensions() {
  static const std::vector<std::string> extensions = {".mp4", ".avi", ".mkv", ".webm", ".gif", ".mov"};
  return extensions;
}

VideoDataset::VideoDataset(fs::path root, VideoDatasetOptions options)
    : root_(std::move(root)), options_(std::move(options)), frame_cache_(std::make_shared<FrameCache>()) {
  if (!fs::is_directory(root_)) throw InputError(fmt::format("{}: video dataset root is not a directory", root_.string()));
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty()) {
    throw InputError(fmt::format("{}: no class folder (expected UCF-101 layout: root/<class>/<video>)", root_.string()));
  }
  const auto& extensions = video_extensions();
  int64_t ignored = 0;
  for (size_t label = 0; label < classes_.size(); ++label) {
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(root_ / classes_[label])) entries.push_back(entry.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& path : entries) {
      const bool video_file = fs::is_regular_file(path) &&
                              std::find(extensions.begin(), extensions.end(), lower_extension(path)) != extensions.end();
      const bool frame_folder = fs::is_directory(path) && FrameFolderReader::looks_like_frame_folder(path);
      if (video_file || frame_folder) {
        items_.push_back({path, static_cast<int64_t>(label)});
      } else {
        ++ignored;
      }
    }
  }
  if (items_.empty()) {
    throw InputError(fmt::format("{}: no videos in {} class folders (looked for {} files and folders of frame images)",
                                 root_.string(), classes_.size(), fmt::join(extensions, " ")));
  }
  log::info("video dataset {}: {} videos in {} classes{}", root_.string(), items_.size(), classes_.size(),
            ignored > 0 ? fmt::format(" ({} other entries ignored)", ignored) : std::string());
}

VideoDataset::VideoDataset(std::vector<fs::path> videos, fs::path source, VideoDatasetOptions options)
    : root_(std::move(source)), options_(std::move(options)), frame_cache_(std::make_shared<FrameCache>()) {
  if (videos.empty()) throw InputError(fmt::format("{}: no videos", root_.string()));
  items_.reserve(videos.size());
  for (auto& path : videos) items_.push_back({std::move(path), 0});
  log::info("video dataset {}: {} videos", root_.string(), items_.size());
}

const fs::path& VideoDataset::item_path(int64_t index) const {
  check_index(index, size(), root_);
  return items_[static_cast<size_t>(index)].path;
}

int64_t VideoDataset::item_label(int64_t index) const {
  check_index(index, size(), root_);
  return items_[static_cast<size_t>(index)].label;
}

// Decoded frames of every video read so far, for cache_frames.
struct VideoDataset::FrameCache {
  std::mutex mutex;
  std::map<int64_t, torch::Tensor> frames;  // uint8 [N, H, W, 3]
};

namespace {

// A video already decoded into memory: clips are cut from the tensor exactly as from the file.
class InMemoryVideo : public VideoSource {
 public:
  InMemoryVideo(fs::path path, torch::Tensor frames) : path_(std::move(path)), frames_(std::move(frames)) {}
  const fs::path& path() const override { return path_; }
  int64_t frame_count() override { return frames_.size(0); }
  double fps() const override { return 0.0; }
  int64_t width() const override { return frames_.size(2); }
  int64_t height() const override { return frames_.size(1); }
  torch::Tensor read_frames(const std::vector<int64_t>& indices) override {
    return frames_.index_select(0, torch::tensor(indices, torch::kLong));
  }

 private:
  fs::path path_;
  torch::Tensor frames_;
};

}  // namespace

VideoExample VideoDataset::get(int64_t index, std::mt19937_64& generator) const {
  check_index(index, size(), root_);
  for (int64_t step = 0; step < size(); ++step) {
    const int64_t candidate = (index + step) % size();
    if (options_.on_bad_video == OnBadVideo::skip && skipped_->contains(candidate)) continue;
    const Item& item = items_[static_cast<size_t>(candidate)];
    try {
      auto open = [&]() -> std::unique_ptr<VideoSource> {
        if (fs::is_directory(item.path)) return std::make_unique<FrameFolderReader>(item.path, options_.frame_folder_fps);
        return std::make_unique<VideoReader>(item.path);
      };
      std::unique_ptr<VideoSource> video;
      if (options_.cache_frames) {
        std::lock_guard<std::mutex> lock(frame_cache_->mutex);
        auto found = frame_cache_->frames.find(candidate);
        if (found == frame_cache_->frames.end()) {
          auto file = open();
          std::vector<int64_t> all(static_cast<size_t>(file->frame_count()));
          std::iota(all.begin(), all.end(), 0);
          found = frame_cache_->frames.emplace(candidate, file->read_frames(all)).first;
        }
        video = std::make_unique<InMemoryVideo>(item.path, found->second);
      } else {
        video = open();
      }
      return {sample_clip(*video, options_.clip, generator), item.label, candidate};
    } catch (const InputError& error) {
      if (options_.on_bad_video == OnBadVideo::fail) {
        throw InputError(fmt::format("{}\nHINT: set on_bad_video: skip to skip unreadable or too short videos (each "
                                     "skip is logged and counted)",
                                     error.what()));
      }
      skipped_->add(candidate, item.path.string(), error.what());
    }
  }
  throw InputError(fmt::format("{}: every one of the {} videos was skipped as unreadable or too short",
                               root_.string(), size()));
}

// ---------------------------------------------------------------------------------------------------------------
// LatentDataset

LatentDataset::LatentDataset(fs::path root, OnBadVideo on_bad_file) : root_(std::move(root)), on_bad_file_(on_bad_file) {
  if (!fs::is_directory(root_)) throw InputError(fmt::format("{}: latent dataset root is not a directory", root_.string()));
  for (const auto& entry : fs::recursive_directory_iterator(root_)) {
    if (entry.is_regular_file() && lower_extension(entry.path()) == ".safetensors") files_.push_back(entry.path());
  }
  std::sort(files_.begin(), files_.end());
  if (files_.empty()) throw InputError(fmt::format("{}: no .safetensors latent files", root_.string()));
}

const fs::path& LatentDataset::item_path(int64_t index) const {
  check_index(index, size(), root_);
  return files_[static_cast<size_t>(index)];
}

LatentExample LatentDataset::get(int64_t index) const {
  check_index(index, size(), root_);
  for (int64_t step = 0; step < size(); ++step) {
    const int64_t candidate = (index + step) % size();
    if (on_bad_file_ == OnBadVideo::skip && skipped_->contains(candidate)) continue;
    const fs::path& file = files_[static_cast<size_t>(candidate)];
    try {
      const auto tensors = io::SafetensorsFile::open(file);
      auto latent = tensors.load("latent");
      auto label = tensors.load("label");
      if (latent.dim() != 4 || !latent.is_floating_point()) {
        throw InputError(fmt::format("{}: tensor 'latent' must be floating point [F, C, h, w], got {} {}",
                                     file.string(), std::string(c10::toString(latent.scalar_type())), c10::str(latent.sizes())));
      }
      if (label.numel() != 1 || label.scalar_type() != torch::kInt64) {
        throw InputError(fmt::format("{}: tensor 'label' must be one int64, got {} {}", file.string(),
                                     std::string(c10::toString(label.scalar_type())), c10::str(label.sizes())));
      }
      return {latent, label.item<int64_t>(), candidate};
    } catch (const InputError& error) {
      if (on_bad_file_ == OnBadVideo::fail) throw;
      skipped_->add(candidate, file.string(), error.what());
    }
  }
  throw InputError(fmt::format("{}: every one of the {} latent files was skipped as unreadable", root_.string(), size()));
}

void save_latent(const fs::path& path, const torch::Tensor& latent, int64_t label) {
  TORCH_CHECK(latent.dim() == 4, "save_latent expects [F, C, h, w], got ", latent.sizes());
  io::save_safetensors(path, {{"latent", latent}, {"label", torch::tensor({label}, torch::kInt64)}},
                       {{"format", "pt"}});
}

}  // namespace tune::data
