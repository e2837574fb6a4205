// Training images as Sana's torchvision transform makes them: the crop geometry on Pillow-made non-square
// gradients checked pixel by pixel against explicit formulas, the antialiased resize against Pillow's own resize
// (scripts/image_reference.py), and unreadable images named.
#include <catch2/catch.hpp>

#include "image_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/image_transform.h"
#include "tune/data/video_reader.h"

using namespace tune::data;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// The gradient image_reference.py draws, as the transform should see it after cropping at (top, left):
// red = x, green = y, blue = (7x + 3y) % 256, scaled to [-1, 1].
torch::Tensor expected_gradient_crop(int64_t top, int64_t left, int64_t size) {
  auto ys = torch::arange(top, top + size, torch::kInt64).view({-1, 1}).expand({size, size});
  auto xs = torch::arange(left, left + size, torch::kInt64).view({1, -1}).expand({size, size});
  auto rgb = torch::stack({xs.remainder(256), ys.remainder(256), (xs * 7 + ys * 3).remainder(256)});
  return rgb.to(torch::kFloat) / 255.0 * 2.0 - 1.0;
}

}  // namespace

TEST_CASE("images: torchvision's Resize output size (short side, long side truncated)", "[image]") {
  const auto landscape = short_side_resized_size(30, 40, 16);  // int(16 * 40 / 30) = int(21.33)
  CHECK(landscape.height == 16);
  CHECK(landscape.width == 21);
  const auto portrait = short_side_resized_size(40, 30, 16);
  CHECK(portrait.height == 21);
  CHECK(portrait.width == 16);
  const auto photo = short_side_resized_size(333, 1000, 256);  // int(768.77)
  CHECK(photo.width == 768);
  CHECK(short_side_resized_size(512, 512, 1024).width == 1024);
  CHECK_THROWS_WITH(short_side_resized_size(0, 5, 4), Contains("5x0"));
}

TEST_CASE("images: center crop of non-square images, offsets rounded half to even", "[image]") {
  if (!video_support_available()) {
    WARN("tune was built without FFmpeg: image test skipped");
    return;
  }
  const auto dir = testing::scratch_dir();
  struct Case {
    int64_t width, height, top, left;
  };
  // round(24 / 2) = 12; round(1 / 2) = 0 and round(3 / 2) = 2 (Python rounds halves to even); round(6 / 2) = 3.
  for (const Case& c : {Case{48, 24, 0, 12}, Case{25, 24, 0, 0}, Case{27, 24, 0, 2}, Case{24, 30, 3, 0}}) {
    INFO(c.width << "x" << c.height);
    const auto path = dir / ("gradient_" + std::to_string(c.width) + "x" + std::to_string(c.height) + ".png");
    if (!testing::run_image_reference("gradient " + testing::quoted(path) + " " + std::to_string(c.width) + " " +
                                      std::to_string(c.height))) {
      return;
    }
    const auto image = load_training_image(path, 24);  // the short side is 24 already: no resampling
    REQUIRE(image.sizes() == torch::IntArrayRef({3, 24, 24}));
    CHECK(image.scalar_type() == torch::kFloat);
    CHECK(torch::allclose(image, expected_gradient_crop(c.top, c.left, 24), 0, 1e-6));
  }
}

TEST_CASE("images: shrinking and enlarging match Pillow's bilinear resize and center crop", "[image]") {
  if (!video_support_available()) {
    WARN("tune was built without FFmpeg: image test skipped");
    return;
  }
  const auto dir = testing::scratch_dir();
  struct Case {
    int64_t width, height, size;
  };
  // Shrinking by 2.5 and 3 (where antialiasing matters), and enlarging a small image.
  for (const Case& c : {Case{100, 60, 24}, Case{45, 90, 15}, Case{20, 12, 32}}) {
    INFO(c.width << "x" << c.height << " -> " << c.size);
    const auto path = dir / ("gradient_" + std::to_string(c.width) + "x" + std::to_string(c.height) + ".png");
    const auto raw = dir / "reference.raw";
    if (!testing::run_image_reference("gradient " + testing::quoted(path) + " " + std::to_string(c.width) + " " +
                                      std::to_string(c.height)) ||
        !testing::run_image_reference("resize_crop " + testing::quoted(path) + " " + std::to_string(c.size) + " " +
                                      testing::quoted(raw))) {
      return;
    }
    const auto pillow = testing::read_raw_rgb(raw, c.size, c.size).permute({2, 0, 1}).to(torch::kFloat);
    const auto ours = (load_training_image(path, c.size) + 1) * 127.5;  // back to Pillow's 0..255 scale
    REQUIRE(ours.sizes() == pillow.sizes());
    // Pillow rounds to 8 bits and resamples in fixed point; ours stays float: within one level (measured up to
    // 0.94, mean up to 0.27; F.interpolate without antialiasing was off by up to 119 levels on these shrinks).
    CHECK((ours - pillow).abs().max().item<float>() <= 1.0);
    CHECK((ours - pillow).abs().mean().item<float>() <= 0.4);
  }
}

TEST_CASE("images: the multi-scale resize to cover a bucket, against the official transform in Pillow", "[image]") {
  SECTION("the resized size: the binding side exact, the other truncated, never short of its target") {
    const auto wide = cover_resized_size(1080, 1920, 768, 1344);  // 768/1080 > 1344/1920: height binds
    CHECK(wide.height == 768);
    CHECK(wide.width == 1365);  // int(1920 * 768 / 1080) = int(1365.33)
    const auto tall = cover_resized_size(1000, 500, 1024, 1024);  // width binds: int(1000 * 1024 / 500)
    CHECK(tall.height == 2048);
    CHECK(tall.width == 1024);
    CHECK_THROWS_WITH(cover_resized_size(0, 5, 4, 4), Contains("5x0"));
  }
  if (!video_support_available()) {
    WARN("tune was built without FFmpeg: image test skipped");
    return;
  }
  const auto dir = testing::scratch_dir();
  struct Case {
    int64_t width, height, target_height, target_width;
  };
  // Shrinks with either side binding (where antialiasing matters), an enlargement, an odd crop offset.
  for (const Case& c : {Case{100, 60, 16, 32}, Case{45, 90, 32, 16}, Case{20, 12, 24, 48}, Case{37, 53, 32, 16}}) {
    INFO(c.width << "x" << c.height << " -> " << c.target_width << "x" << c.target_height);
    const auto path = dir / ("gradient_" + std::to_string(c.width) + "x" + std::to_string(c.height) + ".png");
    const auto raw = dir / "bucket_reference.raw";
    if (!testing::run_image_reference("gradient " + testing::quoted(path) + " " + std::to_string(c.width) + " " +
                                      std::to_string(c.height)) ||
        !testing::run_image_reference("bucket_resize_crop " + testing::quoted(path) + " " +
                                      std::to_string(c.target_height) + " " + std::to_string(c.target_width) + " " +
                                      testing::quoted(raw))) {
      return;
    }
    const auto pillow =
        testing::read_raw_rgb(raw, c.target_height, c.target_width).permute({2, 0, 1}).to(torch::kFloat);
    const auto ours = (transform_image_to(read_training_image(path), c.target_height, c.target_width) + 1) * 127.5;
    REQUIRE(ours.sizes() == pillow.sizes());
    // Both store each pass in 8 bits; Pillow's weights are fixed point: at most one level apart (measured: three
    // cases equal pixel for pixel, 37x53 one level off on under 1% of its values).
    CHECK((ours - pillow).abs().max().item<float>() <= 1.0 + 1e-4);
    CHECK((ours - pillow).abs().mean().item<float>() <= 0.02);
  }
}

TEST_CASE("images: an unreadable image is named, with what was expected", "[image]") {
  const auto dir = testing::scratch_dir();
  const auto text = testing::write_file("not_an_image.png", "this is text, not a PNG");
  if (!video_support_available()) {
    CHECK_THROWS_WITH(load_training_image(text, 16), Contains("built without FFmpeg"));
    return;
  }
  CHECK_THROWS_AS(load_training_image(text, 16), tune::InputError);
  CHECK_THROWS_WITH(load_training_image(text, 16),
                    Contains(text.string() + ": not a readable image") && Contains(".png .jpg .jpeg .bmp"));
  CHECK_THROWS_WITH(load_training_image(dir / "missing.jpg", 16),
                    Contains((dir / "missing.jpg").string()) && Contains("no such image file"));
  CHECK_THROWS_WITH(transform_image(torch::zeros({3, 8, 8}), 4), Contains("uint8 [H, W, 3]"));
}
