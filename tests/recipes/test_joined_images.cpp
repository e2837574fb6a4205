// Image-video joint training's data side (text-to-video Latte's data.use_image_num): join_images puts n captioned
// images after each clip's frames and their captions after its own, drawn from the clip's own generator (so a
// resumed run draws the same images), and caption dropout empties every caption of a dropped row.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>

#include "tune/recipes/diffusion/captioned_latents.h"

using namespace tune::recipes::diffusion_common;

namespace {

// Clip i: frames filled with `offset + i`, a caption [L=3, D=2] filled with the same value, 2 real tokens.
class NumberedClips final : public ClipSource {
 public:
  NumberedClips(int64_t count, int64_t frames, double offset) : count_(count), frames_(frames), offset_(offset) {}
  int64_t size() const override { return count_; }
  Clip get(int64_t index, std::mt19937_64& /*generator*/) const override {
    const double value = offset_ + static_cast<double>(index);
    Clip clip;
    clip.frames = torch::full({frames_, 4, 2, 2}, value);
    clip.text = torch::full({3, 2}, value);
    clip.text_mask = torch::tensor({1, 1, 0}, torch::kLong);
    return clip;
  }

 private:
  int64_t count_, frames_;
  double offset_;
};

}  // namespace

TEST_CASE("join_images adds n captioned images after a clip's frames, drawn by the clip's generator",
          "[recipes][latte_t2v]") {
  const auto videos = std::make_shared<NumberedClips>(5, 3, 0.0);
  const auto images = std::make_shared<NumberedClips>(7, 1, 100.0);
  const auto joined = join_images(videos, images, 2);
  CHECK(joined->size() == 5);
  std::set<double> drawn;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 generator(seed), again(seed);
    const Clip clip = joined->get(4, generator);
    REQUIRE(clip.frames.sizes() == torch::IntArrayRef({5, 4, 2, 2}));
    REQUIRE(clip.text.sizes() == torch::IntArrayRef({3, 3, 2}));
    REQUIRE(clip.text_mask.sizes() == torch::IntArrayRef({3, 3}));
    CHECK(clip.frames.narrow(0, 0, 3).eq(4.0).all().item<bool>());  // the video's frames first, in order
    CHECK(clip.text[0].eq(4.0).all().item<bool>());                 // then its caption first
    for (int64_t j = 0; j < 2; ++j) {
      const double image = clip.frames[3 + j][0][0][0].item<double>();
      CHECK(image >= 100.0);
      CHECK(image <= 106.0);
      CHECK(clip.frames[3 + j].eq(image).all().item<bool>());
      CHECK(clip.text[1 + j].eq(image).all().item<bool>());  // each image with its own caption
      drawn.insert(image);
    }
    // The same generator state draws the same images: exact resume.
    CHECK(torch::equal(joined->get(4, again).frames, clip.frames));
  }
  CHECK(drawn.size() >= 5);  // 40 draws from 7 images: the draw is random, not a fixed pick
}

TEST_CASE("drop_captions empties every caption of a dropped row, joined images' included", "[recipes][latte_t2v]") {
  Conditioning condition;
  condition.text = torch::arange(2 * 3 * 4 * 2, torch::kFloat).reshape({2, 3, 4, 2}) + 1;  // [B, 1 + n, L, D]
  condition.text_mask = torch::ones({2, 3, 4}, torch::kLong);
  const auto null_text = torch::full({4, 2}, -1.0);
  const auto null_mask = torch::tensor({1, 0, 0, 0}, torch::kLong);
  const auto [text, mask] = drop_captions(condition, torch::tensor({0, 1}, torch::kLong), null_text, null_mask);
  CHECK(torch::equal(text[0], condition.text[0]));
  CHECK(torch::equal(mask[0], condition.text_mask[0]));
  for (int64_t k = 0; k < 3; ++k) {
    CHECK(torch::equal(text[1][k], null_text));
    CHECK(torch::equal(mask[1][k], null_mask));
  }
  // [B, L, D] captions (no joined images) as before.
  Conditioning plain;
  plain.text = condition.text.select(1, 0);
  plain.text_mask = condition.text_mask.select(1, 0);
  const auto [plain_text, plain_mask] = drop_captions(plain, torch::tensor({1, 0}, torch::kLong), null_text, null_mask);
  CHECK(torch::equal(plain_text[0], null_text));
  CHECK(torch::equal(plain_text[1], plain.text[1]));
  CHECK(torch::equal(plain_mask[0], null_mask));
}
