// The multi-scale training buckets against the official trainer's published table (NVlabs/Sana and PixArt-Sigma,
// diffusion/data/datasets/utils.py ASPECT_RATIO_1024, transcribed here as literals; tune derives it by scaling
// ASPECT_RATIO_2048_BIN) and get_closest_ratio's choice, ties included.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tune/diffusion/aspect_ratio_bins.h"

using namespace tune::diffusion;

namespace {

struct Published {
  const char* key;
  int64_t height, width;
};

// ASPECT_RATIO_1024 as published (keys and [height, width]).
const std::vector<Published> kAspectRatio1024 = {
    {"0.25", 512, 2048},  {"0.26", 512, 1984},  {"0.27", 512, 1920},  {"0.28", 512, 1856},  {"0.32", 576, 1792},
    {"0.33", 576, 1728},  {"0.35", 576, 1664},  {"0.4", 640, 1600},   {"0.42", 640, 1536},  {"0.48", 704, 1472},
    {"0.5", 704, 1408},   {"0.52", 704, 1344},  {"0.57", 768, 1344},  {"0.6", 768, 1280},   {"0.68", 832, 1216},
    {"0.72", 832, 1152},  {"0.78", 896, 1152},  {"0.82", 896, 1088},  {"0.88", 960, 1088},  {"0.94", 960, 1024},
    {"1.0", 1024, 1024},  {"1.07", 1024, 960},  {"1.13", 1088, 960},  {"1.21", 1088, 896},  {"1.29", 1152, 896},
    {"1.38", 1152, 832},  {"1.46", 1216, 832},  {"1.67", 1280, 768},  {"1.75", 1344, 768},  {"2.0", 1408, 704},
    {"2.09", 1472, 704},  {"2.4", 1536, 640},   {"2.5", 1600, 640},   {"2.89", 1664, 576},  {"3.0", 1728, 576},
    {"3.11", 1792, 576},  {"3.62", 1856, 512},  {"3.75", 1920, 512},  {"3.88", 1984, 512},  {"4.0", 2048, 512}};

}  // namespace

TEST_CASE("training buckets: ASPECT_RATIO_1024 and 512 as published, other resolutions floored to the unit",
          "[diffusion][buckets]") {
  const auto buckets = training_buckets(1024, 32);
  REQUIRE(buckets.size() == kAspectRatio1024.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    INFO("key " << kAspectRatio1024[i].key);
    CHECK(buckets[i].height == kAspectRatio1024[i].height);
    CHECK(buckets[i].width == kAspectRatio1024[i].width);
    CHECK(buckets[i].ratio == std::stod(kAspectRatio1024[i].key));
  }
  // ASPECT_RATIO_512 is the same table halved ('0.32': [288, 896], '3.62': [928, 256]); every side a multiple of 32.
  const auto half = training_buckets(512, 32);
  REQUIRE(half.size() == 40);
  CHECK(half[4].height == 288);
  CHECK(half[4].width == 896);
  CHECK(half[36].height == 928);
  CHECK(half[36].width == 256);
  // ASPECT_RATIO_256's '0.32': [144, 448]: 144 is 4.5 units of DC-AE's 32, floored to 128; 448 stays.
  const auto quarter = training_buckets(256, 32);
  CHECK(quarter[4].height == 128);
  CHECK(quarter[4].width == 448);
  // A tiny resolution: never below one unit (the 2048 table's 1024 at 32 / 2048 is 16 pixels, floored to 0 units).
  const auto tiny = training_buckets(32, 32);
  for (const auto& bucket : tiny) {
    CHECK(bucket.height % 32 == 0);
    CHECK(bucket.width % 32 == 0);
    CHECK(bucket.height >= 32);
    CHECK(bucket.width >= 32);
  }
  CHECK(tiny.back().height == 64);  // '4.0': 4096 x 1024 at 1/64
  CHECK(tiny.back().width == 32);
}

TEST_CASE("training buckets: an image goes to the nearest key, ties to the first as Python's min",
          "[diffusion][buckets]") {
  const auto buckets = training_buckets(1024, 32);
  // 1080p landscape: 1080 / 1920 = 0.5625 -> '0.57' (0.0075 away; '0.52' is 0.0425).
  const auto landscape = nearest_bucket(buckets, 1080, 1920);
  CHECK(landscape.height == 768);
  CHECK(landscape.width == 1344);
  const auto square = nearest_bucket(buckets, 333, 333);
  CHECK(square.height == 1024);
  CHECK(square.width == 1024);
  // Beyond the table's ends: the end keys.
  CHECK(nearest_bucket(buckets, 10, 1000).width == 2048);
  CHECK(nearest_bucket(buckets, 1000, 10).height == 2048);
  // 0.265 is 0.005 from both '0.26' and '0.27' in exact arithmetic; in doubles |0.26 - 0.265| and |0.27 - 0.265|
  // differ in the last bits, so the choice follows Python's float comparison of the same numbers.
  const double to_026 = std::abs(0.26 - 53.0 / 200.0), to_027 = std::abs(0.27 - 53.0 / 200.0);
  const auto tie = nearest_bucket(buckets, 53, 200);
  CHECK(tie.width == (to_027 < to_026 ? 1920 : 1984));
  // An exact tie: the first of equal distances wins.
  const std::vector<BinnedSize> equal_keys = {{100, 200, 0.5}, {300, 600, 0.5}};
  CHECK(nearest_bucket(equal_keys, 1, 2).height == 100);
}
