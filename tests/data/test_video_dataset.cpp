// Video and latent datasets: UCF-101 folder layout, labels from sorted class folders, fail and skip modes for bad
// videos (counted, logged, never used), and latent files read back exactly.
#include <catch2/catch.hpp>

#include <fstream>

#include "data_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/video_dataset.h"
#include "tune/data/video_reader.h"
#include "tune/data/video_writer.h"
#include "tune/io/safetensors.h"

using namespace tune::data;
namespace fs = std::filesystem;

namespace {

int64_t index_of(const VideoDataset& dataset, const std::string& file_name) {
  for (int64_t i = 0; i < dataset.size(); ++i) {
    if (dataset.item_path(i).filename() == file_name) return i;
  }
  FAIL("no item " << file_name);
  return -1;
}

// root/b_walk: 2 good mp4 + a gif; root/a_run: 1 good mp4, a 4-frame mp4, random bytes; root/c_empty; notes.txt.
fs::path make_dataset_tree() {
  const auto root = testing::scratch_dir() / "videos";
  for (const char* name : {"b_walk", "a_run", "c_empty"}) fs::create_directories(root / name);
  auto frames = torch::randint(0, 256, {12, 24, 32, 3}, torch::kInt64).to(torch::kUInt8);
  write_video(root / "b_walk" / "w1.mp4", frames, 8);
  write_video(root / "b_walk" / "w2.MP4", frames, 8);
  write_video(root / "b_walk" / "w3.gif", frames, 8);
  write_video(root / "a_run" / "r1.mp4", frames, 8);
  write_video(root / "a_run" / "r2_short.mp4", frames.slice(0, 0, 4), 8);
  std::ofstream(root / "a_run" / "r3_random.mp4") << std::string(2000, 'x');
  std::ofstream(root / "a_run" / "notes.txt") << "ignored";
  return root;
}

}  // namespace

TEST_CASE("video dataset: UCF-101 layout, sorted class labels, clips of the configured shape", "[video][dataset]") {
  if (!video_support_available()) {
    WARN("tune was built without FFmpeg: video test skipped");
    return;
  }
  const auto root = make_dataset_tree();
  VideoDatasetOptions options;
  options.clip.num_frames = 8;
  options.clip.frame_interval = 1;
  options.clip.image_size = 16;
  VideoDataset dataset(root, options);
  CHECK(dataset.classes() == std::vector<std::string>{"a_run", "b_walk", "c_empty"});
  CHECK(dataset.size() == 6);  // notes.txt is not a video
  CHECK(dataset.item_label(index_of(dataset, "r1.mp4")) == 0);
  CHECK(dataset.item_label(index_of(dataset, "w2.MP4")) == 1);
  CHECK(dataset.item_label(index_of(dataset, "w3.gif")) == 1);
  std::mt19937_64 generator(0);
  for (const char* name : {"r1.mp4", "w1.mp4", "w2.MP4", "w3.gif"}) {
    const auto example = dataset.get(index_of(dataset, name), generator);
    CHECK(example.video.sizes() == torch::IntArrayRef({8, 3, 16, 16}));
    CHECK(example.video.min().item<float>() >= -1.0f);
    CHECK(example.video.max().item<float>() <= 1.0f);
    CHECK(example.label == dataset.item_label(example.index));
    CHECK(example.index == index_of(dataset, name));
  }
  // fail mode: a bad video throws, naming the file.
  CHECK_THROWS_WITH(dataset.get(index_of(dataset, "r2_short.mp4"), generator),
                    Catch::Contains("r2_short.mp4") && Catch::Contains("too short"));
  CHECK_THROWS_WITH(dataset.get(index_of(dataset, "r3_random.mp4"), generator),
                    Catch::Contains("r3_random.mp4") && Catch::Contains("not a video"));
  CHECK(dataset.skipped_count() == 0);
}

TEST_CASE("video dataset: skip mode logs and counts bad videos and never returns them", "[video][dataset]") {
  if (!video_support_available()) {
    WARN("tune was built without FFmpeg: video test skipped");
    return;
  }
  const auto root = make_dataset_tree();
  VideoDatasetOptions options;
  options.clip.num_frames = 8;
  options.clip.frame_interval = 2;
  options.clip.image_size = 16;
  options.on_bad_video = parse_on_bad_video("skip");
  VideoDataset dataset(root, options);
  std::mt19937_64 generator(1);
  const int64_t short_index = index_of(dataset, "r2_short.mp4");
  const int64_t random_index = index_of(dataset, "r3_random.mp4");
  const auto example = dataset.get(short_index, generator);
  CHECK(example.index != short_index);
  CHECK(example.index != random_index);
  CHECK(dataset.skipped_count() >= 1);
  for (int round = 0; round < 2; ++round) {
    for (int64_t i = 0; i < dataset.size(); ++i) {
      const auto got = dataset.get(i, generator);
      CHECK(got.index != short_index);
      CHECK(got.index != random_index);
      CHECK(got.video.sizes() == torch::IntArrayRef({8, 3, 16, 16}));
    }
  }
  CHECK(dataset.skipped_count() == 2);  // each bad video counted once
  const auto names = dataset.skipped();
  REQUIRE(names.size() == 2);
  CHECK_THAT(names[0] + " " + names[1], Catch::Contains("r2_short.mp4") && Catch::Contains("r3_random.mp4"));
  CHECK_THROWS_AS(parse_on_bad_video("ignore"), tune::UsageError);
}

TEST_CASE("video dataset: a root without class folders or videos is an error naming it", "[video][dataset]") {
  const auto empty = testing::scratch_dir() / "empty_root";
  fs::create_directories(empty);
  CHECK_THROWS_WITH(VideoDataset(empty, {}), Catch::Contains(empty.string()) && Catch::Contains("no class folder"));
  fs::create_directories(empty / "only_class");
  CHECK_THROWS_WITH(VideoDataset(empty, {}), Catch::Contains(empty.string()) && Catch::Contains("no videos"));
  CHECK_THROWS_AS(VideoDataset(empty / "missing", {}), tune::InputError);
}

TEST_CASE("latent dataset reads latent and label per file; bad files fail or are skipped", "[video][dataset]") {
  const auto root = testing::scratch_dir() / "latents";
  fs::create_directories(root / "sub");
  const auto first = torch::randn({4, 4, 8, 8});
  const auto second = torch::randn({4, 4, 8, 8}).to(torch::kBFloat16);
  save_latent(root / "a.safetensors", first, 3);
  save_latent(root / "sub" / "b.safetensors", second, 1);
  LatentDataset dataset(root);
  REQUIRE(dataset.size() == 2);
  auto example = dataset.get(0);
  CHECK(torch::equal(example.latent, first));
  CHECK(example.label == 3);
  example = dataset.get(1);
  CHECK(torch::equal(example.latent, second));
  CHECK(example.label == 1);

  tune::io::save_safetensors(root / "c_no_label.safetensors", {{"latent", first}});
  tune::io::save_safetensors(root / "d_flat.safetensors",
                             {{"latent", torch::zeros({4, 8, 8})}, {"label", torch::tensor({0}, torch::kInt64)}});
  LatentDataset strict(root);
  REQUIRE(strict.size() == 4);
  CHECK_THROWS_WITH(strict.get(1), Catch::Contains("c_no_label.safetensors") && Catch::Contains("label"));
  CHECK_THROWS_WITH(strict.get(2), Catch::Contains("d_flat.safetensors") && Catch::Contains("[F, C, h, w]"));
  LatentDataset lenient(root, OnBadVideo::skip);
  CHECK(lenient.get(1).index == 3);  // sorted a, c_no_label, d_flat, sub/b: c and d skipped
  CHECK(lenient.skipped_count() == 2);
  CHECK_THROWS_AS(LatentDataset(testing::scratch_dir()), tune::InputError);
}
