// read_latent_manifest: latents.json written by `tune prepare` round-trips, and a damaged one is an InputError naming
// the file and the field. fuzz/latent_manifest_fuzzer.cpp found a float where an integer belongs (num_frames: 1e300)
// converted with undefined behaviour, and a non-object crashing with nlohmann's type_error.
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/scratch_dir.h"
#include "tune/core/error.h"
#include "tune/recipes/diffusion/latent_manifest.h"

using namespace tune::recipes::diffusion_common;

namespace {

std::string error_reading(const std::filesystem::path& directory, const std::string& text) {
  std::ofstream(directory / kLatentManifestName) << text;
  try {
    read_latent_manifest(directory);
  } catch (const tune::InputError& error) {
    return error.what();
  }
  FAIL("no error for: " << text);
  return "";
}

}  // namespace

TEST_CASE("latents.json round-trips, and a damaged one names the file and field", "[recipes][latte]") {
  tune::testing::ScratchDir dir;
  LatentManifest written;
  written.classes = {"a", "b"};
  written.videos = 4;
  written.num_frames = 16;
  written.frame_interval = 3;
  written.image_size = 64;
  written.flip = true;
  written.vae = "/models/vae";
  written.latent_channels = 4;
  written.latent_size = 8;
  written.scaling_factor = 0.18215;
  written.seed = 18446744073709551615ull;  // seeds are uint64: the largest one survives
  written.complete = true;
  write_latent_manifest(dir.path(), written);
  const LatentManifest read = read_latent_manifest(dir.path());
  CHECK(same_preparation(read, written));
  CHECK(read.videos == 4);
  CHECK(read.complete);
  CHECK_FALSE(read.text.has_value());

  SECTION("a captioned (text-to-video) manifest keeps its text section, which takes part in the comparison") {
    LatentManifest captioned = written;
    captioned.classes.clear();
    captioned.text = TextManifest{"/data/captions.jsonl", "/models/t5", 120, 4096, "bf16"};
    write_latent_manifest(dir.path(), captioned);
    const LatentManifest again = read_latent_manifest(dir.path());
    REQUIRE(again.text.has_value());
    CHECK(*again.text == *captioned.text);
    CHECK(same_preparation(again, captioned));
    CHECK_FALSE(same_preparation(again, written));
    LatentManifest longer = captioned;
    longer.text->max_tokens = 60;
    CHECK_FALSE(same_preparation(again, longer));
    std::ifstream captioned_in(dir.path() / kLatentManifestName);
    auto damaged = nlohmann::json::parse(captioned_in);
    damaged["text"]["dtype"] = "fp16";
    CHECK_THAT(error_reading(dir.path(), damaged.dump()), Catch::Contains("dtype"));
    damaged["text"] = 3;
    CHECK_THAT(error_reading(dir.path(), damaged.dump()), Catch::Contains("field 'text' must be an object"));
    write_latent_manifest(dir.path(), written);
  }

  std::ifstream in(dir.path() / kLatentManifestName);
  const auto good = nlohmann::json::parse(in);
  const auto with = [&](const std::string& field, const nlohmann::json& value) {
    nlohmann::json edited = good;
    edited[field] = value;
    return edited.dump();
  };
  CHECK_THAT(error_reading(dir.path(), with("num_frames", 1e300)),
             Catch::Contains("latents.json: field 'num_frames' must be an integer"));
  CHECK_THAT(error_reading(dir.path(), with("seed", -1)), Catch::Contains("field 'seed' must be a non-negative"));
  CHECK_THAT(error_reading(dir.path(), with("classes", {1})), Catch::Contains("field 'classes' must be a list"));
  CHECK_THAT(error_reading(dir.path(), "[1, 2]"), Catch::Contains("latents.json: not a valid latents manifest"));
  CHECK_THAT(error_reading(dir.path(), "{\"format\": \"other\"}"),
             Catch::Contains("field 'format' must be \"tune-latents-v1\""));
}
