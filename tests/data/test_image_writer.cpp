// Writing .png and .jpg samples: read back by tune's own reader and by Pillow (scripts/image_reference.py). PNG is
// bit-exact at any size, JPEG close (4:4:4 keeps one-pixel colour stripes, full range keeps black and white), float
// images rounded as hand-computed, and every error names the file.
#include <catch2/catch.hpp>

#include "image_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/image_writer.h"
#include "tune/data/video_reader.h"

using namespace tune::data;
namespace fs = std::filesystem;
using Catch::Contains;

#define SKIP_WITHOUT_FFMPEG()                                          \
  if (!video_support_available()) {                                    \
    WARN("tune was built without FFmpeg: image test skipped");         \
    return;                                                            \
  }

TEST_CASE("images: PNG at odd sizes reads back bit-exact with tune's reader and with Pillow", "[image]") {
  SKIP_WITHOUT_FFMPEG();
  const auto dir = testing::scratch_dir();
  torch::manual_seed(7);
  for (const auto& [height, width] : std::vector<std::pair<int64_t, int64_t>>{{23, 37}, {1, 1}, {64, 9}}) {
    INFO(height << "x" << width);
    const auto pixels = torch::randint(0, 256, {height, width, 3}, torch::kInt64).to(torch::kUInt8);
    const auto path = dir / ("random_" + std::to_string(height) + "x" + std::to_string(width) + ".png");
    write_image(path, pixels);
    CHECK(!fs::exists(fs::path(path) += ".tmp"));
    CHECK(torch::equal(read_image(path), pixels));
    if (const auto pillow = testing::pillow_decode(path, height, width)) CHECK(torch::equal(*pillow, pixels));
  }
}

TEST_CASE("images: a float [3, H, W] image is rounded as round((x + 1) * 127.5), clamped", "[image]") {
  SKIP_WITHOUT_FFMPEG();
  // Hand-computed: -1 -> 0, -0.5 -> 63.75 -> 64, 0 -> 127.5 -> 128 (half to even), 0.5 -> 191.25 -> 191, 1 -> 255,
  // out of range clamped to 0 and 255.
  const auto row = torch::tensor({-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, -3.0f, 2.0f});
  const auto expected_row = torch::tensor({0, 64, 128, 191, 255, 0, 255}, torch::kUInt8);
  const auto image = torch::stack({row, row.flip(0), -row}).unsqueeze(1);  // [3, 1, 7]
  const auto expected = torch::stack({expected_row, expected_row.flip(0), torch::tensor({255, 191, 128, 64, 0, 255, 0},
                                                                                        torch::kUInt8)},
                                     1)
                            .unsqueeze(0);  // [1, 7, 3]
  CHECK(torch::equal(image_to_uint8(image), expected));
  const auto path = testing::scratch_dir() / "rounded.png";
  write_image(path, image);
  CHECK(torch::equal(read_image(path), expected));
  if (const auto pillow = testing::pillow_decode(path, 1, 7)) CHECK(torch::equal(*pillow, expected));
}

TEST_CASE("images: JPEG reads back close, keeps full range and one-pixel colour stripes (4:4:4)", "[image]") {
  SKIP_WITHOUT_FFMPEG();
  const auto dir = testing::scratch_dir();
  // A smooth image with mild texture, as decoded samples are.
  const int64_t height = 41, width = 57;
  auto ys = torch::arange(height, torch::kFloat).view({-1, 1}).expand({height, width});
  auto xs = torch::arange(width, torch::kFloat).view({1, -1}).expand({height, width});
  auto smooth = torch::stack({xs * 4, ys * 5, 128 + 60 * torch::sin(xs / 5 + ys / 7)}, 2).clamp(0, 255).round();
  const auto pixels = smooth.to(torch::kUInt8);
  for (const char* name : {"smooth.jpg", "smooth.JPEG"}) {
    INFO(name);
    const auto path = dir / name;
    write_image(path, pixels);
    const auto ours = read_image(path);
    REQUIRE(ours.sizes() == pixels.sizes());
    CHECK(testing::max_abs_difference(ours, pixels) <= 6);
    const float mean_error = (ours.to(torch::kFloat) - pixels.to(torch::kFloat)).abs().mean().item<float>();
    UNSCOPED_INFO("mean error " << mean_error);
    CHECK(mean_error < 1.0);
    if (const auto pillow = testing::pillow_decode(path, height, width)) {
      CHECK(testing::max_abs_difference(*pillow, pixels) <= 6);
      CHECK(testing::max_abs_difference(*pillow, ours) <= 3);  // two decoders of one file: IDCT and colour rounding only
    }
  }
  // Full range: limited-range YCbCr would bring black up to 16 and white down to 235 after a naive decode.
  const auto black_white = torch::cat({torch::zeros({8, 16, 3}, torch::kUInt8), torch::full({8, 16, 3}, 255,
                                                                                            torch::kUInt8)});
  write_image(dir / "black_white.jpg", black_white);
  if (const auto pillow = testing::pillow_decode(dir / "black_white.jpg", 16, 16)) {
    CHECK(testing::max_abs_difference(*pillow, black_white) <= 2);
  }
  // Alternating pure red and pure blue columns, odd width: 4:2:0 or 4:2:2 would average each pair to purple (an
  // error near 127); 4:4:4 keeps each column's colour.
  auto stripes = torch::zeros({16, 17, 3}, torch::kUInt8);
  stripes.slice(1, 0, 17, 2).select(2, 0).fill_(255);
  stripes.slice(1, 1, 17, 2).select(2, 2).fill_(255);
  write_image(dir / "stripes.jpg", stripes);
  CHECK(testing::max_abs_difference(read_image(dir / "stripes.jpg"), stripes) <= 48);
  if (const auto pillow = testing::pillow_decode(dir / "stripes.jpg", 16, 17)) {
    CHECK(testing::max_abs_difference(*pillow, stripes) <= 48);
  }
}

TEST_CASE("images: a '%' in the name is written as given, and an existing file is replaced", "[image]") {
  SKIP_WITHOUT_FFMPEG();
  const auto dir = testing::scratch_dir();
  const auto path = dir / "sample%03d.png";  // image2's pattern syntax, which the writer must not expand
  write_image(path, torch::zeros({4, 6, 3}, torch::kUInt8));
  write_image(path, torch::full({4, 6, 3}, 200, torch::kUInt8));
  CHECK(fs::exists(path));
  CHECK(!fs::exists(dir / "sample001.png"));
  CHECK(torch::equal(read_image(path), torch::full({4, 6, 3}, 200, torch::kUInt8)));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary left
}

TEST_CASE("images: errors name the file and what was expected", "[image]") {
  const auto dir = testing::scratch_dir();
  const auto pixels = torch::zeros({4, 6, 3}, torch::kUInt8);
  CHECK_THROWS_AS(write_image(dir / "a.bmp", pixels), tune::UsageError);
  CHECK_THROWS_WITH(write_image(dir / "a.bmp", pixels),
                    Contains((dir / "a.bmp").string()) && Contains("'.bmp'") && Contains(".png .jpg .jpeg"));
  CHECK_THROWS_WITH(write_image(dir / "noext", pixels), Contains("unknown image extension ''"));
  CHECK_THROWS_WITH(write_image(dir / "a.png", torch::zeros({1, 3, 4, 6})),
                    Contains("uint8 [H, W, 3] or float [3, H, W]") && Contains("[1, 3, 4, 6]"));
  CHECK_THROWS_WITH(write_image(dir / "a.png", torch::zeros({4, 6, 3})), Contains("[4, 6, 3]"));
  CHECK_THROWS_WITH(write_image(dir / "a.png", torch::zeros({0, 6, 3}, torch::kUInt8)),
                    Contains((dir / "a.png").string()) && Contains("6x0"));
  if (!video_support_available()) {
    CHECK_THROWS_WITH(write_image(dir / "a.png", pixels), Contains("built without FFmpeg"));
    return;
  }
  const auto missing_folder = dir / "no" / "such" / "folder" / "a.png";
  CHECK_THROWS_WITH(write_image(missing_folder, pixels), Contains(missing_folder.string()));
  CHECK(!fs::exists(dir / "a.png"));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 0);
}
