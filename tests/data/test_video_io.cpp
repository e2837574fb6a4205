// Video reading and writing against an independent tool: test videos made at test time by the ffmpeg CLI (testsrc
// and solid colours) and by scripts/make_moving_shapes.py (PNG frame folders written with zlib, no FFmpeg), read
// back by our reader; our writer's files read back by our reader and, where installed, by ffprobe.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <random>

#include "data_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/video_reader.h"
#include "tune/data/video_writer.h"

using namespace tune::data;
namespace fs = std::filesystem;

namespace {

bool have_ffmpeg_cli() { return std::system("command -v ffmpeg >/dev/null 2>&1") == 0; }

void run(const std::string& command) {
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// Mean colour of one decoded frame, per channel.
std::vector<double> mean_colour(const torch::Tensor& frame) {
  auto mean = frame.to(torch::kDouble).mean(torch::IntArrayRef{0, 1});
  return {mean[0].item<double>(), mean[1].item<double>(), mean[2].item<double>()};
}

// Largest difference of any pixel's channel from `colour`.
int64_t max_error(const torch::Tensor& frame, const std::vector<int>& colour) {
  auto expected = torch::tensor({colour[0], colour[1], colour[2]}, torch::kInt64);
  return (frame.to(torch::kInt64) - expected).abs().max().item<int64_t>();
}

// Centroid (x, y) of pixels whose every channel exceeds 100 (the shape; backgrounds are <= 40).
std::pair<double, double> bright_centroid(const torch::Tensor& frame) {
  auto mask = (frame.to(torch::kInt64).amin(2) > 100).to(torch::kDouble);
  const double count = mask.sum().item<double>();
  REQUIRE(count > 0);
  auto ys = torch::arange(frame.size(0), torch::kDouble).view({-1, 1});
  auto xs = torch::arange(frame.size(1), torch::kDouble).view({1, -1});
  return {(mask * xs).sum().item<double>() / count, (mask * ys).sum().item<double>() / count};
}

#define SKIP_WITHOUT_FFMPEG_LIBS()                                       \
  if (!video_support_available()) {                                      \
    WARN("tune was built without FFmpeg: video test skipped");           \
    return;                                                              \
  }
#define SKIP_WITHOUT_FFMPEG_CLI()                                                              \
  if (!have_ffmpeg_cli()) {                                                                    \
    WARN("the ffmpeg command is not installed (scripts/setup.sh installs it): test skipped"); \
    return;                                                                                    \
  }

}  // namespace

TEST_CASE("reader: an ffmpeg testsrc video gives its frame count, size, fps and frames in request order", "[video]") {
  SKIP_WITHOUT_FFMPEG_LIBS();
  SKIP_WITHOUT_FFMPEG_CLI();
  const auto dir = testing::scratch_dir();
  const auto mp4 = dir / "testsrc.mp4";
  run("ffmpeg -v error -y -f lavfi -i testsrc=size=64x48:rate=10 -frames:v 25 -c:v libx264 -pix_fmt yuv420p " +
      quoted(mp4));
  VideoReader reader(mp4);
  CHECK(reader.frame_count() == 25);
  CHECK(reader.count_frames_by_decoding() == 25);
  CHECK(reader.width() == 64);
  CHECK(reader.height() == 48);
  CHECK(reader.fps() == Approx(10.0));
  CHECK(reader.codec_name() == "h264");
  const auto frames = reader.read_frames({24, 0, 3, 3});
  REQUIRE(frames.sizes() == torch::IntArrayRef({4, 48, 64, 3}));
  CHECK(frames.scalar_type() == torch::kUInt8);
  CHECK(torch::equal(frames[2], frames[3]));
  CHECK(!torch::equal(frames[0], frames[1]));  // testsrc's counter changes every frame
  CHECK(torch::equal(reader.read_frames({0})[0], frames[1]));
  try {
    reader.read_frames({25});
    FAIL("expected InputError");
  } catch (const tune::InputError& error) {
    CHECK_THAT(error.what(), Catch::Contains(mp4.string()) && Catch::Contains("ended after 25 frames"));
  }

  // Matroska states no frame count: the reader decodes and counts.
  const auto mkv = dir / "testsrc.mkv";
  run("ffmpeg -v error -y -f lavfi -i testsrc=size=32x32:rate=12 -frames:v 13 -c:v ffv1 " + quoted(mkv));
  VideoReader mkv_reader(mkv);
  CHECK(mkv_reader.frame_count() == 13);
  CHECK(mkv_reader.fps() == Approx(12.0));
  CHECK(mkv_reader.read_frames({12}).size(0) == 1);
}

TEST_CASE("reader: solid ffmpeg colour frames decode to that colour within codec tolerance", "[video]") {
  SKIP_WITHOUT_FFMPEG_LIBS();
  SKIP_WITHOUT_FFMPEG_CLI();
  const auto dir = testing::scratch_dir();
  // H.264 in yuv420p, limited range: the RGB -> YUV -> RGB round trip of a flat colour is within 3 levels.
  const auto mp4 = dir / "colour.mp4";
  run("ffmpeg -v error -y -f lavfi -i color=c=0x20A0E0:size=32x32:rate=5 -frames:v 5 -c:v libx264 -crf 0 "
      "-pix_fmt yuv420p " + quoted(mp4));
  VideoReader reader(mp4);
  REQUIRE(reader.frame_count() == 5);
  const auto frames = reader.read_frames({0, 4});
  for (int64_t f = 0; f < 2; ++f) CHECK(max_error(frames[f], {0x20, 0xA0, 0xE0}) <= 3);
  // ffv1 in bgr0 is lossless, but lavfi's colour source renders in YUV first: the same few levels.
  const auto mkv = dir / "colour.mkv";
  run("ffmpeg -v error -y -f lavfi -i color=c=0x3366CC:size=16x8:rate=5 -frames:v 3 -c:v ffv1 -pix_fmt bgr0 " +
      quoted(mkv));
  CHECK(max_error(VideoReader(mkv).read_frames({2})[0], {0x33, 0x66, 0xCC}) <= 3);
}

TEST_CASE("reader: files that are not videos are InputErrors naming the file", "[video]") {
  SKIP_WITHOUT_FFMPEG_LIBS();
  const auto dir = testing::scratch_dir();
  std::mt19937_64 generator(5);
  std::string bytes(4096, '\0');
  for (auto& byte : bytes) byte = static_cast<char>(generator() & 0xFF);
  const auto random_mp4 = testing::write_file("random.mp4", bytes);
  try {
    VideoReader reader(random_mp4);
    FAIL("expected InputError");
  } catch (const tune::InputError& error) {
    CHECK_THAT(error.what(), Catch::Contains(random_mp4.string()) && Catch::Contains("not a video"));
  }
  CHECK_THROWS_AS(VideoReader(dir / "missing.mp4"), tune::InputError);
  if (have_ffmpeg_cli()) {
    const auto wav = dir / "sound.wav";
    run("ffmpeg -v error -y -f lavfi -i sine=duration=0.2 " + quoted(wav));
    try {
      VideoReader reader(wav);
      FAIL("expected InputError");
    } catch (const tune::InputError& error) {
      CHECK_THAT(error.what(), Catch::Contains(wav.string()) && Catch::Contains("no video stream"));
    }
  }
  // A truncated MP4 (its index is written at the end) cannot be opened or decoded: still named.
  const auto whole = dir / "whole.mp4";
  auto frames = torch::randint(0, 256, {10, 32, 32, 3}, torch::kInt64).to(torch::kUInt8);
  write_video(whole, frames, 8);
  std::ifstream in(whole, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto truncated = testing::write_file("truncated.mp4", content.substr(0, content.size() / 2));
  try {
    VideoReader reader(truncated);
    reader.read_frames({9});
    FAIL("expected InputError");
  } catch (const tune::InputError& error) {
    CHECK_THAT(error.what(), Catch::Contains(truncated.string()));
  }
}

TEST_CASE("writer: .mp4 and .gif round trip frame count, size, fps and colours", "[video]") {
  SKIP_WITHOUT_FFMPEG_LIBS();
  const auto dir = testing::scratch_dir();
  const std::vector<std::vector<int>> colours = {{255, 0, 0},     {0, 255, 0},    {0, 0, 255},    {255, 255, 255},
                                                 {0, 0, 0},       {200, 120, 40}, {30, 90, 160},  {128, 128, 128}};
  auto frames = torch::empty({8, 24, 40, 3}, torch::kUInt8);
  for (int64_t f = 0; f < 8; ++f) {
    for (int c = 0; c < 3; ++c) frames[f].select(2, c).fill_(colours[size_t(f)][size_t(c)]);
  }
  WARN("mp4 encoder in this build: " << mp4_encoder_name());

  const auto mp4 = dir / "colours.mp4";
  write_video(mp4, frames, 8);
  CHECK(!fs::exists(dir / "colours.mp4.tmp"));
  VideoReader mp4_reader(mp4);
  CHECK(mp4_reader.frame_count() == 8);
  CHECK(mp4_reader.width() == 40);
  CHECK(mp4_reader.height() == 24);
  CHECK(mp4_reader.fps() == Approx(8.0));
  auto decoded = mp4_reader.read_frames({0, 1, 2, 3, 4, 5, 6, 7});
  for (int64_t f = 0; f < 8; ++f) {
    INFO("frame " << f);
    const auto mean = mean_colour(decoded[f]);  // lossy: flat frames come back within a few levels
    for (int c = 0; c < 3; ++c) CHECK(std::abs(mean[size_t(c)] - colours[size_t(f)][size_t(c)]) <= 6);
  }

  // GIF: a fixed 6x7x6 palette, so each channel is within half a palette step (25.5 levels).
  const auto gif = dir / "colours.gif";
  write_video(gif, frames, 10);
  VideoReader gif_reader(gif);
  CHECK(gif_reader.frame_count() == 8);
  CHECK(gif_reader.width() == 40);
  CHECK(gif_reader.height() == 24);
  decoded = gif_reader.read_frames({0, 1, 2, 3, 4, 5, 6, 7});
  for (int64_t f = 0; f < 8; ++f) CHECK(max_error(decoded[f], colours[size_t(f)]) <= 26);

  if (have_ffmpeg_cli()) {  // an independent reader agrees on the frame count
    const auto count = dir / "count.txt";
    run("ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 " +
        quoted(mp4) + " > " + quoted(count));
    std::ifstream in(count);
    int64_t frames_counted = 0;
    in >> frames_counted;
    CHECK(frames_counted == 8);
  }

  // The model's layout: float [F, 3, H, W] in [-1, 1]; -1 -> 0, 1 -> 255, out-of-range values clamp.
  auto model_frames = torch::zeros({2, 3, 16, 16});
  model_frames[0].fill_(-1);
  model_frames[1].fill_(3);
  const auto bytes = frames_to_uint8(model_frames);
  REQUIRE(bytes.sizes() == torch::IntArrayRef({2, 16, 16, 3}));
  CHECK(bytes[0].max().item<int>() == 0);
  CHECK(bytes[1].min().item<int>() == 255);
  CHECK(frames_to_uint8(torch::zeros({1, 3, 2, 2}))[0][0][0][0].item<int>() == 128);
  write_video(dir / "model.gif", model_frames, 8);
  CHECK(VideoReader(dir / "model.gif").frame_count() == 2);
}

TEST_CASE("writer: unknown extensions, odd mp4 sizes and unfinished files are handled", "[video]") {
  SKIP_WITHOUT_FFMPEG_LIBS();
  const auto dir = testing::scratch_dir();
  auto frames = torch::zeros({2, 16, 16, 3}, torch::kUInt8);
  try {
    write_video(dir / "clip.webp", frames, 8);
    FAIL("expected UsageError");
  } catch (const tune::UsageError& error) {
    CHECK_THAT(error.what(), Catch::Contains("clip.webp") && Catch::Contains(".mp4") && Catch::Contains(".gif"));
  }
  CHECK_THROWS_AS(write_video(dir / "odd.mp4", torch::zeros({2, 15, 16, 3}, torch::kUInt8), 8), tune::UsageError);
  write_video(dir / "odd.gif", torch::zeros({2, 15, 17, 3}, torch::kUInt8), 8);  // GIF takes any size
  CHECK(VideoReader(dir / "odd.gif").width() == 17);
  CHECK_THROWS_AS(write_video(dir / "bad_layout.mp4", torch::zeros({2, 16, 16, 3}), 8), tune::Error);
  {
    VideoWriter writer(dir / "abandoned.mp4", 16, 16);
    writer.write(frames);
    CHECK(fs::exists(dir / "abandoned.mp4.tmp"));
    CHECK(!fs::exists(dir / "abandoned.mp4"));
  }
  CHECK(!fs::exists(dir / "abandoned.mp4.tmp"));
  CHECK(!fs::exists(dir / "abandoned.mp4"));
}

TEST_CASE("frame folders from make_moving_shapes.py decode exactly and the shape moves in its class direction",
          "[video]") {
  SKIP_WITHOUT_FFMPEG_LIBS();
  const auto out = testing::scratch_dir() / "shapes";
  const bool with_mp4 = have_ffmpeg_cli();
  run(std::string(TUNE_PYTHON) + " " + quoted(fs::path(TUNE_SOURCE_DIR) / "scripts" / "make_moving_shapes.py") + " --out " +
      quoted(out) + " --videos-per-class 2 --num-frames 12 --size 32 --seed 3" +
      (with_mp4 ? " --mp4-per-class 1" : "") + " > /dev/null");
  std::ifstream manifest_file(out / "manifest.json");
  const auto manifest = nlohmann::json::parse(manifest_file);
  const int side = manifest["shape_size"];
  int checked = 0;
  for (const auto& video : manifest["videos"]) {
    const fs::path path = out / video["path"].get<std::string>();
    INFO(path.string());
    auto source = open_video(path);
    REQUIRE(source->frame_count() == 12);
    REQUIRE(source->width() == 32);
    REQUIRE(source->height() == 32);
    std::vector<int64_t> all(12);
    for (int64_t t = 0; t < 12; ++t) all[size_t(t)] = t;
    const auto frames = source->read_frames(all);
    const bool lossless = fs::is_directory(path);
    const std::vector<int> colour = video["colour"].get<std::vector<int>>();
    const double tolerance = lossless ? 1e-9 : 0.6;  // H.264 (crf 10) blurs the edges a little
    for (int64_t t = 0; t < 12; ++t) {
      const auto [x, y] = bright_centroid(frames[t]);
      const double expected_x = video["x0"].get<int>() + video["dx"].get<int>() * t + side / 2.0 - 0.5;
      const double expected_y = video["y0"].get<int>() + video["dy"].get<int>() * t + side / 2.0 - 0.5;
      CHECK(std::abs(x - expected_x) <= tolerance);
      CHECK(std::abs(y - expected_y) <= tolerance);
    }
    if (lossless) {
      const int x0 = video["x0"].get<int>() + video["dx"].get<int>() * 5;
      const int y0 = video["y0"].get<int>() + video["dy"].get<int>() * 5;
      CHECK(max_error(frames[5].slice(0, y0, y0 + side).slice(1, x0, x0 + side), colour) == 0);
      CHECK(torch::equal(read_image(path / "frame_00005.png"), frames[5]));
    }
    // The direction of motion is the class: 0 right, 1 left, 2 down, 3 up.
    const auto [first_x, first_y] = bright_centroid(frames[0]);
    const auto [last_x, last_y] = bright_centroid(frames[11]);
    const int label = video["label"];
    if (label == 0) CHECK(last_x > first_x + 5);
    if (label == 1) CHECK(last_x < first_x - 5);
    if (label == 2) CHECK(last_y > first_y + 5);
    if (label == 3) CHECK(last_y < first_y - 5);
    ++checked;
  }
  CHECK(checked == (with_mp4 ? 12 : 8));
  // A frame folder whose file is not an image names that file.
  const auto broken = out / "broken";
  fs::create_directories(broken);
  fs::copy_file(out / "0_right" / "v0000" / "frame_00000.png", broken / "frame_00000.png");
  std::ofstream(broken / "frame_00001.png") << "not a png";
  FrameFolderReader folder(broken);
  CHECK(folder.frame_count() == 2);
  CHECK_THROWS_WITH(folder.read_frames({1}), Catch::Contains("frame_00001.png"));
}
