// What captioned videos and captioned images share: a JSONL file of {"<key>": PATH, "caption": TEXT} rows, or a
// folder where each item has a same-named .txt caption beside it, with one set of checks, messages and skip rules.
// captioned_videos.h and captioned_images.h state each kind's key, files and words; only the list is read here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tune/data/video_dataset.h"

namespace tune::data {

// One kind of captioned item, as the shared reader needs to know it.
struct CaptionedMediaKind {
  std::string key;             // the JSONL field naming the item: "video" | "image"
  std::string plural;          // "videos" | "images", in messages
  std::string described;       // what the field holds, in messages: "the video file or frame folder"
  std::string skip_setting;    // the config setting that skips bad items, in hints: "data.on_bad_video: skip"
  std::string folder_contents; // what a folder is searched for, in messages
  // A file that is an item (by extension).
  std::function<bool(const std::filesystem::path&)> is_item_file;
  // A directory that is itself one item and is not searched further (a video's frame folder); empty: none is.
  std::function<bool(const std::filesystem::path&)> is_item_folder;
};

struct CaptionedItem {
  std::filesystem::path path;  // the item: a file, or a folder when the kind has item folders
  std::string caption;         // as written in JSONL (not lower-cased); trimmed from a .txt file
  std::string source;          // where it was named, for errors: "FILE.jsonl:LINE" or "DIR/NAME.txt"
};

struct CaptionedItemList {
  std::vector<CaptionedItem> items;        // in file order (JSONL) or sorted by path (folder)
  int64_t skipped = 0;                     // only with OnBadVideo::skip
  std::vector<std::string> skipped_names;  // "FILE.jsonl:LINE" or the item's path, in the order skipped
};

// The rules captioned_videos.h documents, for any kind: JSONL rows (a JSON array of objects also works) with paths
// relative to the file's folder, other keys ignored, empty captions refused; or a folder searched recursively for
// items with NAME.txt beside them (UTF-8, byte-order mark dropped, whitespace trimmed). Problems throw
// tune::InputError naming FILE:LINE or the path; OnBadVideo::skip leaves out (logged, counted) an item whose caption
// is missing or empty or whose file does not exist, and nothing else.
CaptionedItemList read_captioned_items(const std::filesystem::path& path, const CaptionedMediaKind& kind,
                                       OnBadVideo on_bad);

}  // namespace tune::data
