// Captioned images for text-to-image training (Sana): a JSONL file of {"image": PATH, "caption": TEXT} rows, or a
// folder where each image has a same-named .txt caption beside it. Only the list is read here; image_transform.h
// decodes and crops. The rules are captioned videos' (captioned_media.h holds the one reader of both).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tune/data/video_dataset.h"

namespace tune::data {

struct CaptionedImage {
  std::filesystem::path image;  // an image file (one of image_file_extensions() for folders; any path in JSONL)
  std::string caption;          // as written in JSONL (not lower-cased); trimmed from a .txt file
  std::string source;           // where it was named, for errors: "FILE.jsonl:LINE" or "DIR/NAME.txt"
};

struct CaptionedImageList {
  std::vector<CaptionedImage> images;      // in file order (JSONL) or sorted by image path (folder)
  int64_t skipped = 0;                     // only with OnBadVideo::skip
  std::vector<std::string> skipped_names;  // "FILE.jsonl:LINE" or the image's path, in the order skipped
};

// `path` is either
// - a JSONL file (or a JSON array of objects) of {"image": PATH, "caption": TEXT} rows, PATH relative to the JSONL
//   file's folder unless absolute, other keys ignored, a caption kept as written and refused when blank;
// - a directory searched recursively for image files (image_file_extensions(), any case), each with NAME.txt
//   beside it (a.png -> a.txt), read as UTF-8 with a byte-order mark dropped and surrounding whitespace trimmed.
// Problems throw tune::InputError naming FILE:LINE or the image or caption path, and what was expected (the same
// cases and words as read_captioned_videos, "image" for "video"). With OnBadVideo::skip (the setting is the one
// choice for any media; the hint names data.on_bad_image) an image whose caption is missing or empty, or whose
// file does not exist, is logged, counted and left out; a malformed row still fails. Whether an image decodes is
// found when it is loaded (load_training_image), not here.
CaptionedImageList read_captioned_images(const std::filesystem::path& path, OnBadVideo on_bad);

}  // namespace tune::data
