// The clips the Latte trainer sees: generated moving-shapes videos through VideoDataset (with and without the
// frame cache) and ClipBatcher must keep every clip's frames in time order and pair it with its class label, or a
// model could never learn the direction of motion. The expected motion comes from make_moving_shapes.py's manifest.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "../common/scratch_dir.h"
#include "tune/data/video_reader.h"
#include "tune/recipes/latte/latte_data.h"

namespace {

using tune::recipes::latte::ClipBatcher;

// Brightness-weighted centroid (x, y) of a [3, H, W] frame in [-1, 1] with a bright shape on a dark background.
std::pair<double, double> centroid(const torch::Tensor& frame) {
  const auto brightness = (frame.to(torch::kDouble).mean(0) + 1.0).clamp_min(0.0);
  const auto weights = (brightness - brightness.median()).clamp_min(0.0);
  const double total = weights.sum().item<double>();
  const auto ys = torch::arange(frame.size(1), torch::kDouble).unsqueeze(1);
  const auto xs = torch::arange(frame.size(2), torch::kDouble).unsqueeze(0);
  return {(weights * xs).sum().item<double>() / total, (weights * ys).sum().item<double>() / total};
}

}  // namespace

TEST_CASE("Latte training batches keep frames in time order and labels with their clips", "[recipes][latte]") {
  if (!tune::data::video_support_available()) {
    WARN("built without FFmpeg: video batches not exercised");
    return;
  }
  tune::testing::ScratchDir scratch;
  const auto data = scratch.path() / "shapes";
  const auto script = std::filesystem::path(TUNE_SOURCE_DIR) / "scripts" / "make_moving_shapes.py";
  const std::string command = std::string(TUNE_PYTHON) + " " + script.string() + " --out " + data.string() +
                              " --videos-per-class 3 --num-frames 10 --size 16 --shape-size 4 > /dev/null";
  REQUIRE(std::system(command.c_str()) == 0);

  for (const bool cache : {false, true}) {
    INFO("cache_frames " << cache);
    tune::recipes::latte::LatteSettings settings;
    settings.data.path = data.string();
    settings.data.num_frames = 6;      // a random 6-frame window of each 10-frame video
    settings.data.frame_interval = 1;
    settings.data.image_size = 16;
    settings.data.flip = false;
    settings.data.cache_frames = cache;
    ClipBatcher batcher(tune::recipes::latte::video_clips(tune::recipes::latte::make_video_dataset(settings)), 4, 7);
    for (int b = 0; b < 6; ++b) {  // two epochs of 12 videos
      const auto batch = batcher.next();
      REQUIRE(batch.clips.sizes() == torch::IntArrayRef({4, 6, 3, 16, 16}));
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t label = batch.condition.labels[i].item<int64_t>();
        // make_moving_shapes: 0 right, 1 left, 2 down, 3 up, one pixel per frame
        const double dx = label == 0 ? 1 : label == 1 ? -1 : 0, dy = label == 2 ? 1 : label == 3 ? -1 : 0;
        const auto first = centroid(batch.clips[i][0]);
        for (int64_t f = 1; f < 6; ++f) {
          const auto now = centroid(batch.clips[i][f]);
          INFO("batch " << b << " clip " << i << " label " << label << " frame " << f);
          CHECK(std::abs(now.first - first.first - dx * f) < 1e-6);
          CHECK(std::abs(now.second - first.second - dy * f) < 1e-6);
        }
      }
    }
  }
}
