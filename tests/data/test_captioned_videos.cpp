// Captioned videos: JSONL rows and NAME.txt-beside-the-video folders read into (video, caption, source), every
// problem located by file:line or path, skip mode counting bad videos, and the explicit-list VideoDataset that
// decodes them (the index it returns maps back to the caption).
#include <catch2/catch.hpp>

#include <fstream>

#include "data_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/captioned_videos.h"
#include "tune/data/video_reader.h"
#include "tune/data/video_writer.h"

using namespace tune::data;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A stand-in video: the list readers only check that it exists.
fs::path touch_video(const fs::path& path) {
  write_text(path, "not decoded here");
  return path;
}

// dir/clips/a.mp4 and dir/b.gif exist; `rows` is written to dir/rows.jsonl.
fs::path jsonl_with(const std::string& rows) {
  const auto dir = testing::scratch_dir();
  touch_video(dir / "clips" / "a.mp4");
  touch_video(dir / "b.gif");
  write_text(dir / "rows.jsonl", rows);
  return dir / "rows.jsonl";
}

const std::string kGoodRow = R"({"video": "clips/a.mp4", "caption": "A cat."})" "\n";

}  // namespace

TEST_CASE("captioned videos: JSONL rows with relative and absolute paths, captions as written", "[video][captions]") {
  const auto dir = testing::scratch_dir();
  const auto absolute = touch_video(dir / "elsewhere" / "c.webm");
  const auto file = jsonl_with("\xEF\xBB\xBF" + kGoodRow + "\n" +  // byte-order mark, then a blank line
                               R"({"video": "b.gif", "caption": " Café au lait, STEAMING\n", "fps": 8, "url": "x"})"
                               "\n" +
                               fmt::format(R"({{"video": "{}", "caption": "c"}})", absolute.string()) + "\n");
  const auto list = read_captioned_videos(file, OnBadVideo::fail);
  REQUIRE(list.videos.size() == 3);
  CHECK(list.skipped == 0);
  CHECK(list.videos[0].video == file.parent_path() / "clips" / "a.mp4");
  CHECK(list.videos[0].caption == "A cat.");
  CHECK(list.videos[0].source == file.string() + ":1");
  CHECK(list.videos[1].video == file.parent_path() / "b.gif");
  CHECK(list.videos[1].caption == " Café au lait, STEAMING\n");  // not trimmed, not lower-cased
  CHECK(list.videos[1].source == file.string() + ":3");
  CHECK(list.videos[2].video == absolute);
  CHECK(list.videos[2].source == file.string() + ":4");
}

TEST_CASE("captioned videos: a folder with NAME.txt beside video files and frame folders", "[video][captions]") {
  const auto root = testing::scratch_dir() / "captioned";
  touch_video(root / "b.MP4");
  write_text(root / "b.txt", "\xEF\xBB\xBF  Ein Hund läuft.\r\n\n");
  write_text(root / "sub" / "clip1" / "frame_00000.png", "frame");
  write_text(root / "sub" / "clip1" / "frame_00001.png", "frame");
  write_text(root / "sub" / "clip1.txt", "a shape\nmoving right\n");
  write_text(root / "a.v2" / "frame_00000.jpg", "frame");  // a dotted folder name: the caption is a.v2.txt
  write_text(root / "a.v2.txt", "dotted");
  write_text(root / "orphan.txt", "no video");
  write_text(root / "readme.md", "ignored");
  const auto list = read_captioned_videos(root, OnBadVideo::fail);
  REQUIRE(list.videos.size() == 3);
  CHECK(list.videos[0].video == root / "a.v2");
  CHECK(list.videos[0].caption == "dotted");
  CHECK(list.videos[0].source == (root / "a.v2.txt").string());
  CHECK(list.videos[1].video == root / "b.MP4");
  CHECK(list.videos[1].caption == "Ein Hund läuft.");  // byte-order mark and surrounding whitespace dropped
  CHECK(list.videos[2].video == root / "sub" / "clip1");  // its frames are not videos of their own
  CHECK(list.videos[2].caption == "a shape\nmoving right");
  CHECK(list.videos[2].source == (root / "sub" / "clip1.txt").string());
}

TEST_CASE("captioned videos: each JSONL problem names file:line and what was expected", "[video][captions]") {
  struct Case {
    const char* row;
    const char* expected;
  };
  const Case cases[] = {
      {R"({"video": "clips/a.mp4", "caption": )", "malformed JSON"},
      {R"(["clips/a.mp4", "A cat."])", "not an object"},
      {R"({"path": "clips/a.mp4", "caption": "A cat."})", "missing field 'video'"},
      {R"({"video": 3, "caption": "A cat."})", "field 'video' must be a path"},
      {R"({"video": "", "caption": "A cat."})", "field 'video' must be a path"},
      {R"({"video": "clips/a.mp4", "caption": ["A cat."]})", "field 'caption' must be a string"},
      {R"({"video": "clips/a.mp4", "text": "A cat."})", "missing field 'caption'"},
      {R"({"video": "clips/a.mp4", "caption": " \t\n"})", "field 'caption' is empty"},
      {R"({"video": "clips/missing.mp4", "caption": "A cat."})", "clips/missing.mp4 does not exist"},
  };
  for (const auto& bad : cases) {
    INFO(bad.row);
    const auto file = jsonl_with(kGoodRow + bad.row + "\n");
    CHECK_THROWS_WITH(read_captioned_videos(file, OnBadVideo::fail),
                      Contains(file.string() + ":2: ") && Contains(bad.expected) && Contains("HINT"));
  }
  const auto empty = jsonl_with("\n  \n");
  CHECK_THROWS_WITH(read_captioned_videos(empty, OnBadVideo::fail),
                    Contains(empty.string()) && Contains("empty") && Contains(R"({"video": PATH, "caption": TEXT})"));
  const auto nowhere = testing::scratch_dir() / "nowhere.jsonl";
  CHECK_THROWS_WITH(read_captioned_videos(nowhere, OnBadVideo::fail),
                    Contains(nowhere.string()) && Contains("no such file or folder"));
  const auto video = touch_video(testing::scratch_dir() / "a.mp4");
  CHECK_THROWS_WITH(read_captioned_videos(video, OnBadVideo::fail), Contains(video.string()) && Contains("is a video"));
}

TEST_CASE("captioned videos: folder problems name the video or caption path", "[video][captions]") {
  const auto root = testing::scratch_dir() / "folder";
  touch_video(root / "a.mp4");
  CHECK_THROWS_WITH(read_captioned_videos(root, OnBadVideo::fail),
                    Contains((root / "a.mp4").string() + ": no caption: expected " + (root / "a.txt").string()));
  write_text(root / "a.txt", "\n \n");
  CHECK_THROWS_WITH(read_captioned_videos(root, OnBadVideo::fail),
                    Contains((root / "a.txt").string()) && Contains("is empty"));
  const auto no_videos = testing::scratch_dir() / "no_videos";
  write_text(no_videos / "a.txt", "a caption without a video");
  CHECK_THROWS_WITH(read_captioned_videos(no_videos, OnBadVideo::fail),
                    Contains(no_videos.string() + ": no videos") && Contains(".mp4"));
}

TEST_CASE("captioned videos: skip mode counts bad videos, and broken rows still fail", "[video][captions]") {
  const auto file = jsonl_with(kGoodRow + R"({"video": "clips/a.mp4"})" "\n" +
                               R"({"video": "b.gif", "caption": ""})" "\n" +
                               R"({"video": "gone.mp4", "caption": "x"})" "\n" +
                               R"({"video": "b.gif", "caption": "B"})" "\n");
  const auto list = read_captioned_videos(file, OnBadVideo::skip);
  REQUIRE(list.videos.size() == 2);
  CHECK(list.videos[1].caption == "B");
  CHECK(list.skipped == 3);
  CHECK(list.skipped_names ==
        std::vector<std::string>{file.string() + ":2", file.string() + ":3", file.string() + ":4"});
  const auto broken = jsonl_with(kGoodRow + "{not json\n");
  CHECK_THROWS_WITH(read_captioned_videos(broken, OnBadVideo::skip), Contains(broken.string() + ":2: malformed JSON"));
  const auto all_bad = jsonl_with(R"({"video": "gone.mp4", "caption": "x"})" "\n");
  CHECK_THROWS_WITH(read_captioned_videos(all_bad, OnBadVideo::skip),
                    Contains("no usable captioned video") && Contains(all_bad.string() + ":1"));

  const auto root = testing::scratch_dir() / "folder";
  touch_video(root / "a.mp4");
  touch_video(root / "b.mp4");
  write_text(root / "b.txt", "B");
  touch_video(root / "c.mp4");
  write_text(root / "c.txt", "  ");
  const auto from_folder = read_captioned_videos(root, OnBadVideo::skip);
  REQUIRE(from_folder.videos.size() == 1);
  CHECK(from_folder.videos[0].caption == "B");
  CHECK(from_folder.skipped_names == std::vector<std::string>{(root / "a.mp4").string(), (root / "c.mp4").string()});
}

TEST_CASE("video dataset from an explicit list: clips decoded, the index used maps back to the caption",
          "[video][captions][dataset]") {
  CHECK_THROWS_WITH(VideoDataset(std::vector<fs::path>{}, "empty.jsonl", VideoDatasetOptions{}),
                    Contains("empty.jsonl: no videos"));
  if (!video_support_available()) {
    WARN("tune was built without FFmpeg: video test skipped");
    return;
  }
  const auto dir = testing::scratch_dir();
  const auto frames = torch::randint(0, 256, {12, 24, 32, 3}, torch::kInt64).to(torch::kUInt8);
  write_video(dir / "short.mp4", frames.slice(0, 0, 4), 8);  // too short for 8-frame clips
  write_video(dir / "good.mp4", frames, 8);
  write_text(dir / "rows.jsonl", R"({"video": "short.mp4", "caption": "too short"})" "\n"
                                 R"({"video": "good.mp4", "caption": "random pixels"})" "\n");
  const auto list = read_captioned_videos(dir / "rows.jsonl", OnBadVideo::skip);
  std::vector<fs::path> paths;
  for (const auto& video : list.videos) paths.push_back(video.video);
  VideoDatasetOptions options;
  options.clip.num_frames = 8;
  options.clip.frame_interval = 1;
  options.clip.image_size = 16;
  std::mt19937_64 generator(0);

  const VideoDataset failing(paths, dir / "rows.jsonl", options);
  CHECK(failing.size() == 2);
  CHECK(failing.classes().empty());
  CHECK_THROWS_WITH(failing.get(0, generator), Contains("short.mp4") && Contains("too short"));

  options.on_bad_video = OnBadVideo::skip;
  const VideoDataset dataset(paths, dir / "rows.jsonl", options);
  const auto example = dataset.get(0, generator);
  CHECK(example.index == 1);
  CHECK(example.label == 0);
  CHECK(example.video.sizes() == torch::IntArrayRef({8, 3, 16, 16}));
  CHECK(list.videos[static_cast<size_t>(example.index)].caption == "random pixels");
  CHECK(dataset.skipped() == std::vector<std::string>{(dir / "short.mp4").string()});
  CHECK(dataset.get(1, generator).index == 1);
}
