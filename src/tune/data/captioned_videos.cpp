// Reading captioned-video lists (see captioned_videos.h): JSONL rows through the SFT data files' row readers, or a
// folder walked for videos with NAME.txt beside them.
#include "tune/data/captioned_videos.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/data_file_layouts.h"
#include "tune/data/dataset_file.h"
#include "tune/data/file_extension.h"
#include "tune/data/sft_rows.h"
#include "tune/data/video_reader.h"

namespace tune::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kRowShape = R"({"video": PATH, "caption": TEXT})";

bool is_blank(const std::string& text) { return text.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

bool has_video_extension(const fs::path& path) {
  const auto& extensions = VideoDataset::video_extensions();
  return std::find(extensions.begin(), extensions.end(), lower_extension(path)) != extensions.end();
}

// The one place that decides between failing and skipping: only a bad video (missing, or without a usable
// caption) may be skipped.
void bad_video(OnBadVideo on_bad, CaptionedVideoList& list, const std::string& where, const std::string& reason) {
  if (on_bad == OnBadVideo::fail) {
    throw InputError(fmt::format("{}: {}; HINT: fix it, or skip such videos (data.on_bad_video: skip; each skip is "
                                 "logged and counted)",
                                 where, reason));
  }
  ++list.skipped;
  list.skipped_names.push_back(where);
  log::warn("skipping {} ({} skipped so far): {}", where, list.skipped, reason);
}

// A broken row is a broken file, skipped in neither mode.
[[noreturn]] void bad_row(const std::string& where, const std::string& reason) {
  throw InputError(fmt::format("{}: {}; HINT: each row is one JSON object {}", where, reason, kRowShape));
}

void read_jsonl_rows(const fs::path& path, OnBadVideo on_bad, CaptionedVideoList& list) {
  const fs::path base = path.parent_path();
  ReadReport report;  // rows_read only: every bad row throws or is handled by bad_video
  for_each_json_row(path, OnBadLine::fail, report, [&](const layouts::RawRow& raw) {
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(raw.json.begin(), raw.json.end());
    } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for a number like 1e999
      bad_row(raw.where, fmt::format("malformed JSON: {}", error.what()));
    }
    if (!row.is_object()) bad_row(raw.where, fmt::format("the row is a JSON {}, not an object", row.type_name()));
    const auto video = row.find("video");
    if (video == row.end() || video->is_null()) {
      bad_row(raw.where, fmt::format("missing field 'video' (the video file or frame folder); the row has {}",
                                     rows::field_names(row)));
    }
    if (!video->is_string() || video->get<std::string>().empty()) {
      bad_row(raw.where, fmt::format("field 'video' must be a path (a non-empty string), got {}", video->dump()));
    }
    const auto caption = row.find("caption");
    if (caption != row.end() && !caption->is_null() && !caption->is_string()) {
      bad_row(raw.where, fmt::format("field 'caption' must be a string, got {}", caption->type_name()));
    }
    const fs::path named = video->get<std::string>();
    const fs::path resolved = named.is_absolute() ? named : (base / named).lexically_normal();
    if (caption == row.end() || caption->is_null()) {
      return bad_video(on_bad, list, raw.where,
                       fmt::format("missing field 'caption' (the text for video {}); the row has {}",
                                   resolved.string(), rows::field_names(row)));
    }
    if (is_blank(caption->get<std::string>())) {
      return bad_video(on_bad, list, raw.where, fmt::format("field 'caption' is empty (video {})", resolved.string()));
    }
    if (!fs::exists(resolved)) {
      return bad_video(on_bad, list, raw.where,
                       fmt::format("video {} does not exist{}", resolved.string(),
                                   named.is_absolute() ? std::string()
                                                       : fmt::format(" ('{}' is relative to the JSONL file's folder)",
                                                                     named.string())));
    }
    list.videos.push_back({resolved, caption->get<std::string>(), raw.source});
  });
  if (report.rows_read == 0) {
    throw InputError(fmt::format("{}: the file is empty; expected one row {} per line", path.string(), kRowShape));
  }
}

// NAME.txt beside the video: the extension replaced for a file, appended for a frame folder (clip.v2/ -> clip.v2.txt).
fs::path caption_path_of(const fs::path& video) {
  if (fs::is_directory(video)) return video.parent_path() / (video.filename().string() + ".txt");
  return fs::path(video).replace_extension(".txt");
}

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n\f\v") - first + 1);
}

void read_folder(const fs::path& root, OnBadVideo on_bad, CaptionedVideoList& list) {
  std::vector<fs::path> videos;
  std::set<fs::path> text_files;  // to tell how many captions name no video (a typo in a name shows up as both)
  for (auto entry = fs::recursive_directory_iterator(root); entry != fs::recursive_directory_iterator(); ++entry) {
    const fs::path& path = entry->path();
    if (entry->is_directory()) {
      if (FrameFolderReader::looks_like_frame_folder(path)) {
        videos.push_back(path);
        entry.disable_recursion_pending();  // its images are frames, not videos
      }
    } else if (entry->is_regular_file()) {
      if (has_video_extension(path)) videos.push_back(path);
      if (lower_extension(path) == ".txt") text_files.insert(path);
    }
  }
  if (videos.empty()) {
    throw InputError(fmt::format("{}: no videos (looked recursively for {} files and folders of frame images, each "
                                 "with a NAME.txt caption beside it)",
                                 root.string(), fmt::join(VideoDataset::video_extensions(), " ")));
  }
  std::sort(videos.begin(), videos.end());
  for (const fs::path& video : videos) {
    const fs::path caption_file = caption_path_of(video);
    text_files.erase(caption_file);
    if (!fs::is_regular_file(caption_file)) {
      bad_video(on_bad, list, video.string(), fmt::format("no caption: expected {} beside it", caption_file.string()));
      continue;
    }
    std::ifstream in(caption_file, std::ios::binary);
    if (!in) {
      throw InputError(fmt::format("{}: cannot open the caption file (check its permissions)", caption_file.string()));
    }
    const std::string caption = trimmed(layouts::read_plain_text(in));
    if (caption.empty()) {
      bad_video(on_bad, list, video.string(), fmt::format("its caption {} is empty", caption_file.string()));
      continue;
    }
    list.videos.push_back({video, caption, caption_file.string()});
  }
  if (!text_files.empty()) {
    log::info("captioned videos {}: {} .txt files beside no video were ignored (first: {})", root.string(),
              text_files.size(), text_files.begin()->string());
  }
}

}  // namespace

CaptionedVideoList read_captioned_videos(const fs::path& path, OnBadVideo on_bad) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw InputError(fmt::format("{}: no such file or folder (expected a JSONL file of {} rows, or a folder of videos "
                                 "with NAME.txt captions)",
                                 path.string(), kRowShape));
  }
  CaptionedVideoList list;
  if (fs::is_directory(status)) {
    read_folder(path, on_bad, list);
  } else {
    if (has_video_extension(path)) {
      throw InputError(fmt::format("{}: is a video; captioned videos are a JSONL file of {} rows, or a folder of "
                                   "videos with NAME.txt captions",
                                   path.string(), kRowShape));
    }
    read_jsonl_rows(path, on_bad, list);
  }
  if (list.videos.empty()) {
    throw InputError(fmt::format("{}: no usable captioned video: all {} were skipped (first: {})", path.string(),
                                 list.skipped, list.skipped_names.front()));
  }
  log::info("captioned videos {}: {} videos{}", path.string(), list.videos.size(),
            list.skipped > 0 ? fmt::format(" ({} skipped)", list.skipped) : std::string());
  return list;
}

}  // namespace tune::data
