// Captioned videos for text-to-video training: a JSONL file of {"video": PATH, "caption": TEXT} rows, or a folder
// where each video has a same-named .txt caption beside it. Only the list is read here; VideoDataset decodes.
// The reader is the one captioned images use too (captioned_media.h); this file says what a video is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tune/data/video_dataset.h"

namespace tune::data {

struct CaptionedVideo {
  std::filesystem::path video;  // a video file (VideoDataset::video_extensions()) or a folder of frame images
  std::string caption;          // as written (not lower-cased; the prompt rule is the recipe's)
  std::string source;           // where it was named, for errors: "FILE.jsonl:LINE" or "DIR/NAME.txt"
};

struct CaptionedVideoList {
  std::vector<CaptionedVideo> videos;      // in file order (JSONL) or sorted by video path (folder)
  int64_t skipped = 0;                     // only with OnBadVideo::skip
  std::vector<std::string> skipped_names;  // "FILE.jsonl:LINE" or the video's path, in the order skipped
};

// `path` is either
// - a JSONL file (or a JSON array of objects, told apart as SFT data files are) of {"video": PATH, "caption": TEXT}
//   rows. PATH is relative to the JSONL file's folder unless absolute. Other keys are ignored: caption files
//   commonly carry extra metadata (fps, source URL, ...), unlike configs, where an unknown key is a typo.
//   The caption is kept exactly as written; one that is empty after trimming whitespace is refused.
// - a directory searched recursively: each video (a file with a video extension, or a sub-folder of frame images,
//   which is not searched further) has its caption in NAME.txt beside it (a.mp4 -> a.txt, frame folder
//   clip1/ -> clip1.txt), read as UTF-8 with a byte-order mark dropped and surrounding whitespace trimmed (a text
//   file's final newline is layout, not caption). Videos are sorted by path; other files are ignored.
// Problems throw tune::InputError naming FILE:LINE (JSONL) or the video or caption path, and what was expected:
// malformed JSON, a row that is not an object, a "video" or "caption" that is not a string, a row without "video",
// a video that does not exist, a missing or empty caption, a caption file that cannot be read, and a list with no
// usable video. With OnBadVideo::skip a row or video whose caption is missing or empty, or whose video does not
// exist, is logged (warn), counted and left out instead; everything else still fails (a malformed row is a broken
// file, not a bad video).
CaptionedVideoList read_captioned_videos(const std::filesystem::path& path, OnBadVideo on_bad);

}  // namespace tune::data
