// Latte clip sampling and transforms on synthetic tensors: frame indices against numpy's linspace, the temporal
// window's range, resize and crop geometry and values against closed-form expectations, flip and normalisation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "tune/core/error.h"
#include "tune/data/clip_sampling.h"
#include "tune/data/video_reader.h"

using namespace tune::data;

namespace {

// A video held in memory: frame t has R = t, G = 8 * x (a left-to-right ramp), B = 200.
class SyntheticVideo : public VideoSource {
 public:
  SyntheticVideo(int64_t frames, int64_t height, int64_t width) : frames_(torch::empty({frames, height, width, 3}, torch::kUInt8)) {
    for (int64_t t = 0; t < frames; ++t) frames_[t].select(2, 0).fill_(t);
    frames_.select(3, 1).copy_((torch::arange(width) * 8).to(torch::kUInt8).expand({frames, height, width}));
    frames_.select(3, 2).fill_(200);
  }
  const std::filesystem::path& path() const override { return path_; }
  int64_t frame_count() override { return frames_.size(0); }
  double fps() const override { return 25; }
  int64_t width() const override { return frames_.size(2); }
  int64_t height() const override { return frames_.size(1); }
  torch::Tensor read_frames(const std::vector<int64_t>& indices) override {
    return frames_.index_select(0, torch::tensor(indices, torch::kInt64));
  }

 private:
  std::filesystem::path path_ = "synthetic.mp4";
  torch::Tensor frames_;
};

int64_t to_byte(float normalised) { return std::lround((normalised + 1.0f) / 2.0f * 255.0f); }

}  // namespace

TEST_CASE("clip frame indices match numpy.linspace(begin, end - 1, n, dtype=int)", "[video][clip]") {
  // Expected values printed by numpy 1.24: np.linspace(b, e - 1, n).astype(int).
  CHECK(linspace_frame_indices(0, 48, 16) ==
        std::vector<int64_t>{0, 3, 6, 9, 12, 15, 18, 21, 25, 28, 31, 34, 37, 40, 43, 47});
  CHECK(linspace_frame_indices(5, 53, 16) ==
        std::vector<int64_t>{5, 8, 11, 14, 17, 20, 23, 26, 30, 33, 36, 39, 42, 45, 48, 52});
  CHECK(linspace_frame_indices(0, 20, 16) ==
        std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 19});
  CHECK(linspace_frame_indices(3, 19, 16) ==
        std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18});
  CHECK(linspace_frame_indices(7, 8, 1) == std::vector<int64_t>{7});
  CHECK(linspace_frame_indices(0, 10, 4) == std::vector<int64_t>{0, 3, 6, 9});
}

TEST_CASE("temporal window starts uniformly in [0, total - span - 1] as Latte's TemporalRandomCrop", "[video][clip]") {
  std::mt19937_64 generator(7);
  std::set<int64_t> begins;
  for (int i = 0; i < 3000; ++i) {
    const auto window = sample_temporal_window(100, 48, generator);
    REQUIRE(window.begin >= 0);
    REQUIRE(window.begin <= 100 - 48 - 1);
    REQUIRE(window.end == window.begin + 48);
    begins.insert(window.begin);
  }
  CHECK(begins.size() == 52);  // every start 0..51 drawn
  const auto short_window = sample_temporal_window(30, 48, generator);
  CHECK(short_window.begin == 0);
  CHECK(short_window.end == 30);
  const auto exact = sample_temporal_window(48, 48, generator);
  CHECK(exact.begin == 0);
  CHECK(exact.end == 48);
}

TEST_CASE("clip indices stay inside the video; fewer frames than num_frames is an error naming the file", "[video][clip]") {
  ClipOptions options;
  options.num_frames = 16;
  options.frame_interval = 3;
  std::mt19937_64 generator(1);
  for (int64_t total : {16, 20, 47, 48, 49, 200}) {
    const auto indices = sample_clip_indices(total, options, generator, "clip.mp4");
    REQUIRE(indices.size() == 16);
    for (size_t i = 1; i < indices.size(); ++i) CHECK(indices[i] > indices[i - 1]);
    CHECK(indices.front() >= 0);
    CHECK(indices.back() < total);
    if (total > 48) CHECK(indices.back() - indices.front() == 47);  // the full span of num_frames * interval
  }
  try {
    sample_clip_indices(15, options, generator, "videos/short_one.avi");
    FAIL("expected InputError");
  } catch (const tune::InputError& error) {
    CHECK_THAT(error.what(), Catch::Contains("videos/short_one.avi") && Catch::Contains("too short") &&
                                 Catch::Contains("15 frames"));
  }
}

TEST_CASE("resize keeps the aspect with the short side at image_size, bilinear as F.interpolate", "[video][clip]") {
  auto ramp = torch::arange(60, torch::kFloat).expand({2, 3, 40, 60}).contiguous();  // value = x
  const auto resized = resize_short_side(ramp, 32);
  REQUIRE(resized.sizes() == torch::IntArrayRef({2, 3, 32, 48}));
  // align_corners=false: output column o samples source x = (o + 0.5) / scale - 0.5, exact on a linear ramp.
  const double scale = 32.0 / 40.0;
  for (int64_t o = 1; o < 47; ++o) {
    const double source = std::clamp((o + 0.5) / scale - 0.5, 0.0, 59.0);
    CHECK(resized[1][2][5][o].item<float>() == Approx(source).margin(1e-4));
  }
  CHECK(resize_short_side(torch::zeros({1, 3, 240, 320}), 256).sizes() == torch::IntArrayRef({1, 3, 256, 341}));
  CHECK(resize_short_side(torch::zeros({1, 3, 320, 240}), 256).sizes() == torch::IntArrayRef({1, 3, 341, 256}));
  // 32 / 49 * 49 < 32 in doubles: Latte's floor would leave 31 rows and its crop would fail.
  CHECK(resize_short_side(torch::zeros({1, 3, 49, 70}), 32).sizes() == torch::IntArrayRef({1, 3, 32, 45}));
}

TEST_CASE("center crop offsets round half to even, as Python's round", "[video][clip]") {
  auto positions = [](int64_t h, int64_t w) {
    auto y = torch::arange(h, torch::kFloat).view({h, 1}) * 100;
    return (y + torch::arange(w, torch::kFloat).view({1, w})).view({1, 1, h, w});
  };
  // (5 - 4) / 2 = 0.5 -> 0, (8 - 4) / 2 = 2 -> 2: the top-left kept pixel is (0, 2).
  auto crop = center_crop(positions(5, 8), 4);
  REQUIRE(crop.sizes() == torch::IntArrayRef({1, 1, 4, 4}));
  CHECK(crop[0][0][0][0].item<float>() == 2);
  // (7 - 4) / 2 = 1.5 -> 2, (10 - 4) / 2 = 3 -> 3.
  crop = center_crop(positions(7, 10), 4);
  CHECK(crop[0][0][0][0].item<float>() == 203);
  // (9 - 4) / 2 = 2.5 -> 2.
  CHECK(center_crop(positions(9, 4), 4)[0][0][0][0].item<float>() == 200);
  CHECK_THROWS_AS(center_crop(positions(3, 8), 4), tune::Error);
}

TEST_CASE("transform_clip gives [F, C, S, S] in [-1, 1] with channels in RGB order and an exact flip", "[video][clip]") {
  auto frames = torch::zeros({2, 8, 8, 3}, torch::kUInt8);
  frames.select(3, 0).fill_(10);
  frames.select(3, 1).fill_(20);
  frames.select(3, 2).fill_(30);
  frames[0][0][0][0] = 0;
  frames[0][0][7][0] = 255;
  const auto clip = transform_clip(frames, 8, false);
  REQUIRE(clip.sizes() == torch::IntArrayRef({2, 3, 8, 8}));
  REQUIRE(clip.scalar_type() == torch::kFloat);
  CHECK(clip[1][0][3][3].item<float>() == Approx(10 / 255.0 * 2 - 1));
  CHECK(clip[1][1][3][3].item<float>() == Approx(20 / 255.0 * 2 - 1));
  CHECK(clip[1][2][3][3].item<float>() == Approx(30 / 255.0 * 2 - 1));
  CHECK(clip[0][0][0][0].item<float>() == -1.0f);
  CHECK(clip[0][0][0][7].item<float>() == 1.0f);
  CHECK(clip.min().item<float>() >= -1.0f);
  CHECK(clip.max().item<float>() <= 1.0f);
  const auto flipped = transform_clip(frames, 8, true);
  CHECK(torch::equal(flipped, clip.flip({-1})));
  CHECK(flipped[0][0][0][7].item<float>() == -1.0f);

  // A 16x24 frame to 8: resized to 8x12, cropped to columns 2..9; the range holds after interpolation.
  auto noise = torch::randint(0, 256, {3, 16, 24, 3}, torch::kInt64).to(torch::kUInt8);
  const auto small = transform_clip(noise, 8, false);
  CHECK(small.sizes() == torch::IntArrayRef({3, 3, 8, 8}));
  CHECK(small.min().item<float>() >= -1.0f);
  CHECK(small.max().item<float>() <= 1.0f);
}

TEST_CASE("sample_clip takes the sampled frames and flips about half the clips", "[video][clip]") {
  SyntheticVideo video(60, 8, 8);
  ClipOptions options;
  options.num_frames = 4;
  options.frame_interval = 5;
  options.image_size = 8;  // same size: the resize is an identity, values stay exact
  std::mt19937_64 generator(123);
  int flips = 0;
  const int draws = 400;
  for (int i = 0; i < draws; ++i) {
    std::mt19937_64 replay = generator;
    const auto expected = sample_clip_indices(60, options, replay, "synthetic.mp4");
    const auto clip = sample_clip(video, options, generator);
    REQUIRE(clip.sizes() == torch::IntArrayRef({4, 3, 8, 8}));
    for (int64_t f = 0; f < 4; ++f) REQUIRE(to_byte(clip[f][0][0][0].item<float>()) == expected[size_t(f)]);
    const bool flipped = to_byte(clip[0][1][0][0].item<float>()) == 56;  // G of the right-most column first
    if (!flipped) REQUIRE(to_byte(clip[0][1][0][0].item<float>()) == 0);
    flips += flipped;
  }
  CHECK(flips > draws * 0.4);
  CHECK(flips < draws * 0.6);
  options.random_flip = false;
  for (int i = 0; i < 20; ++i) CHECK(to_byte(sample_clip(video, options, generator)[0][1][0][0].item<float>()) == 0);
}

TEST_CASE("transform_frames_to covers a non-square target and crops its centre, bilinear as F.interpolate",
          "[video][clip]") {
  // A 20 x 40 frame whose green channel is the column index (a ramp). With align_corners=false, output column j of a
  // resize by s samples source x = (j + 0.5) / s - 0.5 (clamped to the frame); a bilinear ramp is exact there.
  auto frame = torch::zeros({1, 20, 40, 3}, torch::kUInt8);
  frame.select(3, 1).copy_(torch::arange(40).to(torch::kUInt8).expand({1, 20, 40}));
  frame.select(3, 0).fill_(255);
  const auto square = transform_frames_to(frame, 16, 16);
  REQUIRE(square.sizes() == torch::IntArrayRef({1, 3, 16, 16}));
  // A square target is transform_clip's path exactly.
  REQUIRE(torch::equal(square, transform_clip(frame, 16, /*flip=*/false)));
  // A wide target (16 x 32 from 20 x 40: both scales 0.8, the height binds) and a tall one (32 x 8: height 32/20).
  const auto wide = transform_frames_to(frame, 16, 32);
  REQUIRE(wide.sizes() == torch::IntArrayRef({1, 3, 16, 32}));
  for (int64_t j = 0; j < 32; ++j) {
    const double x = std::clamp((j + 0.5) / 0.8 - 0.5, 0.0, 39.0);
    CHECK(wide[0][1][7][j].item<float>() == Approx((x / 255.0 - 0.5) / 0.5).margin(1e-5));
  }
  const auto tall = transform_frames_to(frame, 32, 8);
  REQUIRE(tall.sizes() == torch::IntArrayRef({1, 3, 32, 8}));
  // scale 1.6: 32 x 64, cropped at columns 28..35; column j samples x = (j + 28 + 0.5) / 1.6 - 0.5.
  for (int64_t j = 0; j < 8; ++j) {
    const double x = (j + 28 + 0.5) / 1.6 - 0.5;
    CHECK(tall[0][1][20][j].item<float>() == Approx((x / 255.0 - 0.5) / 0.5).margin(1e-5));
  }
  CHECK(tall[0][0].min().item<float>() == Approx(1.0f));  // red stays full, in [-1, 1]
}
