// Captioned images: JSONL rows of {"image", "caption"} and NAME.txt-beside-the-image folders, read by the same
// reader as captioned videos (captioned_media), with image words in every message; then a listed image loaded.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include "image_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/captioned_images.h"
#include "tune/data/image_transform.h"
#include "tune/data/image_writer.h"
#include "tune/data/video_reader.h"

using namespace tune::data;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// dir/pics/a.png and dir/b.jpg exist (not decoded by the list reader); `rows` is written to dir/rows.jsonl.
fs::path jsonl_with(const std::string& rows) {
  const auto dir = testing::scratch_dir();
  write_text(dir / "pics" / "a.png", "not decoded here");
  write_text(dir / "b.jpg", "not decoded here");
  write_text(dir / "rows.jsonl", rows);
  return dir / "rows.jsonl";
}

const std::string kGoodRow = R"({"image": "pics/a.png", "caption": "A red square."})" "\n";

}  // namespace

TEST_CASE("captioned images: JSONL rows, paths relative to the file's folder, captions as written", "[image][captions]") {
  const auto dir = testing::scratch_dir();
  write_text(dir / "elsewhere" / "c.webp", "x");
  const auto absolute = dir / "elsewhere" / "c.webp";
  const auto file = jsonl_with(kGoodRow + "\n" +
                               R"({"image": "./pics/../b.jpg", "caption": " Two cats\n", "width": 640})" "\n" +
                               fmt::format(R"({{"image": "{}", "caption": "c"}})", absolute.string()) + "\n");
  const auto list = read_captioned_images(file, OnBadVideo::fail);
  REQUIRE(list.images.size() == 3);
  CHECK(list.skipped == 0);
  CHECK(list.images[0].image == file.parent_path() / "pics" / "a.png");
  CHECK(list.images[0].caption == "A red square.");
  CHECK(list.images[0].source == file.string() + ":1");
  CHECK(list.images[1].image == file.parent_path() / "b.jpg");  // normalised
  CHECK(list.images[1].caption == " Two cats\n");
  CHECK(list.images[1].source == file.string() + ":3");
  CHECK(list.images[2].image == absolute);
}

TEST_CASE("captioned images: a folder searched recursively, NAME.txt beside each image", "[image][captions]") {
  const auto root = testing::scratch_dir() / "images";
  write_text(root / "b.PNG", "x");
  write_text(root / "b.txt", "\xEF\xBB\xBF  Ein Hund.\r\n");
  write_text(root / "sub" / "c.jpeg", "x");
  write_text(root / "sub" / "c.txt", "in a sub-folder\n");
  write_text(root / "a.bmp", "x");
  write_text(root / "a.txt", "bitmap");
  write_text(root / "clip.mp4", "a video is not an image");
  write_text(root / "clip.txt", "ignored with its video");
  write_text(root / "notes.md", "ignored");
  const auto list = read_captioned_images(root, OnBadVideo::fail);
  REQUIRE(list.images.size() == 3);
  CHECK(list.images[0].image == root / "a.bmp");
  CHECK(list.images[1].image == root / "b.PNG");
  CHECK(list.images[1].caption == "Ein Hund.");
  CHECK(list.images[1].source == (root / "b.txt").string());
  CHECK(list.images[2].image == root / "sub" / "c.jpeg");
  CHECK(list.images[2].caption == "in a sub-folder");
  const auto& extensions = image_file_extensions();
  if (std::find(extensions.begin(), extensions.end(), ".webp") != extensions.end()) {
    write_text(root / "d.webp", "x");
    write_text(root / "d.txt", "webp");
    const auto with_webp = read_captioned_images(root, OnBadVideo::fail);
    REQUIRE(with_webp.images.size() == 4);
    CHECK(with_webp.images[2].image == root / "d.webp");  // sorted by path: d.webp before sub/c.jpeg
  } else {
    WARN("this FFmpeg has no WebP decoder: .webp files are not images here");
  }
}

TEST_CASE("captioned images: each problem names file:line or the path, in image words", "[image][captions]") {
  struct Case {
    const char* row;
    const char* expected;
  };
  const Case cases[] = {
      {R"({"image": "pics/a.png", "caption": )", "malformed JSON"},
      {R"(["pics/a.png", "A cat."])", "not an object"},
      {R"({"video": "pics/a.png", "caption": "A cat."})", "missing field 'image' (the image file)"},
      {R"({"image": 3, "caption": "A cat."})", "field 'image' must be a path"},
      {R"({"image": "pics/a.png", "caption": 7})", "field 'caption' must be a string"},
      {R"({"image": "pics/a.png", "text": "A cat."})", "missing field 'caption' (the text for image"},
      {R"({"image": "pics/a.png", "caption": "  "})", "field 'caption' is empty (image"},
      {R"({"image": "pics/gone.png", "caption": "A cat."})", "pics/gone.png does not exist"},
  };
  for (const auto& bad : cases) {
    INFO(bad.row);
    const auto file = jsonl_with(kGoodRow + bad.row + "\n");
    CHECK_THROWS_WITH(read_captioned_images(file, OnBadVideo::fail),
                      Contains(file.string() + ":2: ") && Contains(bad.expected) && Contains("HINT"));
  }
  const auto gone = jsonl_with(kGoodRow + R"({"image": "pics/gone.png", "caption": "A cat."})" "\n");
  CHECK_THROWS_WITH(read_captioned_images(gone, OnBadVideo::fail),
                    Contains("pics/gone.png does not exist ('pics/gone.png' is relative to the JSONL file's folder)") &&
                        Contains("data.on_bad_image: skip"));
  const auto empty = jsonl_with("\n");
  CHECK_THROWS_WITH(read_captioned_images(empty, OnBadVideo::fail),
                    Contains("empty") && Contains(R"({"image": PATH, "caption": TEXT})"));
  const auto image = testing::write_file("lone.png", "x");
  CHECK_THROWS_WITH(read_captioned_images(image, OnBadVideo::fail),
                    Contains(image.string() + ": is an image; captioned images are a JSONL file"));
  const auto no_images = testing::scratch_dir() / "no_images";
  write_text(no_images / "a.txt", "a caption without an image");
  CHECK_THROWS_WITH(read_captioned_images(no_images, OnBadVideo::fail),
                    Contains(no_images.string() + ": no images (looked recursively for .png .jpg .jpeg .bmp"));
  const auto uncaptioned = testing::scratch_dir() / "uncaptioned";
  write_text(uncaptioned / "a.png", "x");
  CHECK_THROWS_WITH(read_captioned_images(uncaptioned, OnBadVideo::fail),
                    Contains((uncaptioned / "a.png").string() + ": no caption: expected " +
                             (uncaptioned / "a.txt").string()));
}

TEST_CASE("captioned images: skip mode counts bad images, and a broken row still fails", "[image][captions]") {
  const auto file = jsonl_with(kGoodRow + R"({"image": "b.jpg"})" "\n" +
                               R"({"image": "gone.png", "caption": "x"})" "\n" +
                               R"({"image": "b.jpg", "caption": "B"})" "\n");
  const auto list = read_captioned_images(file, OnBadVideo::skip);
  REQUIRE(list.images.size() == 2);
  CHECK(list.images[1].caption == "B");
  CHECK(list.skipped_names == std::vector<std::string>{file.string() + ":2", file.string() + ":3"});
  const auto broken = jsonl_with(kGoodRow + R"({"image": null, "caption": "x"})" "\n");
  CHECK_THROWS_WITH(read_captioned_images(broken, OnBadVideo::skip), Contains(broken.string() + ":2: missing field"));
  const auto all_bad = jsonl_with(R"({"image": "gone.png", "caption": "x"})" "\n");
  CHECK_THROWS_WITH(read_captioned_images(all_bad, OnBadVideo::skip), Contains("no usable captioned image"));
}

TEST_CASE("captioned images: a listed image loads as [3, S, S] in [-1, 1]", "[image][captions]") {
  if (!video_support_available()) {
    WARN("tune was built without FFmpeg: image test skipped");
    return;
  }
  const auto dir = testing::scratch_dir();
  // 20x10, left half black, right half white: the 10x10 center crop (offset 5) holds 5 columns of each.
  auto pixels = torch::zeros({10, 20, 3}, torch::kUInt8);
  pixels.slice(1, 10, 20).fill_(255);
  write_image(dir / "half.png", pixels);
  write_text(dir / "rows.jsonl", R"({"image": "half.png", "caption": "black and white"})" "\n");
  const auto list = read_captioned_images(dir / "rows.jsonl", OnBadVideo::fail);
  const auto image = load_training_image(list.images.at(0).image, 10);
  REQUIRE(image.sizes() == torch::IntArrayRef({3, 10, 10}));
  CHECK(torch::all(image.slice(2, 0, 5) == -1).item<bool>());
  CHECK(torch::all(image.slice(2, 5, 10) == 1).item<bool>());
}
