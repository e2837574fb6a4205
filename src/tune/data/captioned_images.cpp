// Captioned images (see captioned_images.h): the shared captioned-item reader told what an image is.
#include "tune/data/captioned_images.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tune/data/captioned_media.h"
#include "tune/data/file_extension.h"
#include "tune/data/video_reader.h"

namespace tune::data {

namespace fs = std::filesystem;

namespace {

const CaptionedMediaKind& image_kind() {
  static const CaptionedMediaKind kind = [] {
    CaptionedMediaKind image;
    image.key = "image";
    image.plural = "images";
    image.described = "the image file";
    image.skip_setting = "data.on_bad_image: skip";
    image.folder_contents = fmt::format("{} files", fmt::join(image_file_extensions(), " "));
    image.is_item_file = [](const fs::path& path) {
      const auto& extensions = image_file_extensions();
      return std::find(extensions.begin(), extensions.end(), lower_extension(path)) != extensions.end();
    };
    // No folder is one image: every image in a sub-folder is an item of its own.
    return image;
  }();
  return kind;
}

}  // namespace

CaptionedImageList read_captioned_images(const fs::path& path, OnBadVideo on_bad) {
  CaptionedItemList items = read_captioned_items(path, image_kind(), on_bad);
  CaptionedImageList list;
  list.images.reserve(items.items.size());
  for (auto& item : items.items) {
    list.images.push_back({std::move(item.path), std::move(item.caption), std::move(item.source)});
  }
  list.skipped = items.skipped;
  list.skipped_names = std::move(items.skipped_names);
  return list;
}

}  // namespace tune::data
