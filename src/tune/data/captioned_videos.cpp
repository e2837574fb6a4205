// Captioned videos (see captioned_videos.h): the shared captioned-item reader told what a video is.
#include "tune/data/captioned_videos.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tune/data/captioned_media.h"
#include "tune/data/file_extension.h"
#include "tune/data/video_reader.h"

namespace tune::data {

namespace fs = std::filesystem;

namespace {

const CaptionedMediaKind& video_kind() {
  static const CaptionedMediaKind kind = [] {
    CaptionedMediaKind video;
    video.key = "video";
    video.plural = "videos";
    video.described = "the video file or frame folder";
    video.skip_setting = "data.on_bad_video: skip";
    video.folder_contents =
        fmt::format("{} files and folders of frame images", fmt::join(VideoDataset::video_extensions(), " "));
    video.is_item_file = [](const fs::path& path) {
      const auto& extensions = VideoDataset::video_extensions();
      return std::find(extensions.begin(), extensions.end(), lower_extension(path)) != extensions.end();
    };
    video.is_item_folder = [](const fs::path& path) { return FrameFolderReader::looks_like_frame_folder(path); };
    return video;
  }();
  return kind;
}

}  // namespace

CaptionedVideoList read_captioned_videos(const fs::path& path, OnBadVideo on_bad) {
  CaptionedItemList items = read_captioned_items(path, video_kind(), on_bad);
  CaptionedVideoList list;
  list.videos.reserve(items.items.size());
  for (auto& item : items.items) {
    list.videos.push_back({std::move(item.path), std::move(item.caption), std::move(item.source)});
  }
  list.skipped = items.skipped;
  list.skipped_names = std::move(items.skipped_names);
  return list;
}

}  // namespace tune::data
