// io::read_pipeline_index: a diffusers pipeline directory's model_index.json. Latte-1's, as written by
// scripts/make_diffusers_scheduler_fixture.py (diffusers_scheduler_fixture_setup, into the build tree; written
// with or without diffusers), and hand-made broken ones whose errors must name the file and the key.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "io_test_helpers.h"
#include "tune/io/pipeline_index.h"

using Catch::Contains;
using tune::io::is_pipeline_directory;
using tune::io::read_pipeline_index;
using tune::io::testing::input_error_message;
using tune::io::testing::ScratchDir;

namespace {

std::filesystem::path latte1_pipeline() {
  return std::filesystem::path(TUNE_BINARY_DIR) / "diffusers_scheduler_fixture" / "latte1_pipeline";
}

}  // namespace

TEST_CASE("read_pipeline_index reads Latte-1's model_index.json", "[io][pipeline]") {
  const auto dir = latte1_pipeline();
  REQUIRE(is_pipeline_directory(dir));
  CHECK_FALSE(is_pipeline_directory(dir / "transformer"));
  const auto index = read_pipeline_index(dir);
  CHECK(index.class_name == "LattePipeline");
  CHECK(index.file == dir / "model_index.json");
  REQUIRE(index.components.size() == 5);
  const auto& transformer = index.require("transformer", {"LatteTransformer3DModel"});
  CHECK(transformer.library == "diffusers");
  CHECK(transformer.directory == dir / "transformer");
  CHECK(index.require("text_encoder", {"T5EncoderModel"}).library == "transformers");
  CHECK(index.require("tokenizer", {"T5Tokenizer", "T5TokenizerFast"}).class_name == "T5Tokenizer");
  CHECK(index.require("vae", {}).class_name == "AutoencoderKL");
  CHECK(index.require("scheduler", {"DDIMScheduler", "DPMSolverMultistepScheduler"}).directory == dir / "scheduler");

  CHECK_THAT(input_error_message([&] { index.require("scheduler", {"FlowMatchEulerDiscreteScheduler"}); }),
             Contains("model_index.json") && Contains("'scheduler'") && Contains("DDIMScheduler") &&
                 Contains("accepted: FlowMatchEulerDiscreteScheduler"));
  CHECK_THAT(input_error_message([&] { index.require("image_encoder", {}); }),
             Contains("model_index.json") && Contains("'image_encoder'") && Contains("transformer"));
}

TEST_CASE("read_pipeline_index: null components, settings and metadata are not components", "[io][pipeline]") {
  ScratchDir dir;
  dir.write("unet/config.json", "{}");
  dir.write("model_index.json", R"({
    "_class_name": ["pipeline", "CustomPipeline"], "_diffusers_version": "0.42.1", "_name_or_path": "x/y",
    "unet": ["diffusers", "UNet2DConditionModel"], "safety_checker": [null, null],
    "requires_safety_checker": true, "id2label": {"0": "tench"}})");
  const auto index = read_pipeline_index(dir.path());
  CHECK(index.class_name == "CustomPipeline");
  CHECK(index.diffusers_version == "0.42.1");
  CHECK(index.components.size() == 1);
  CHECK(index.has("unet"));
  CHECK_FALSE(index.has("safety_checker"));
  CHECK_THAT(input_error_message([&] { index.require("safety_checker", {}); }), Contains("'safety_checker'"));
}

TEST_CASE("read_pipeline_index names the file and the key of what is wrong", "[io][pipeline]") {
  ScratchDir dir;
  const auto file = dir / "model_index.json";
  SECTION("no model_index.json") {
    CHECK_FALSE(is_pipeline_directory(dir.path()));
    CHECK_THAT(input_error_message([&] { read_pipeline_index(dir.path()); }),
               Contains(file.string()) && Contains("cannot open"));
  }
  SECTION("malformed JSON") {
    dir.write("model_index.json", R"({"_class_name": "LattePipeline", )");
    CHECK_THAT(input_error_message([&] { read_pipeline_index(dir.path()); }),
               Contains(file.string()) && Contains("invalid JSON"));
  }
  SECTION("no _class_name") {
    dir.write("model_index.json", R"({"vae": ["diffusers", "AutoencoderKL"]})");
    CHECK_THAT(input_error_message([&] { read_pipeline_index(dir.path()); }),
               Contains(file.string()) && Contains("'_class_name'"));
  }
  SECTION("a component entry that is not [library, class]") {
    dir.write("vae/config.json", "{}");
    dir.write("model_index.json", R"({"_class_name": "LattePipeline", "vae": ["diffusers"]})");
    CHECK_THAT(input_error_message([&] { read_pipeline_index(dir.path()); }),
               Contains(file.string()) && Contains("'vae'") && Contains("[library, class]"));
  }
  SECTION("a component whose directory is missing") {
    dir.write("model_index.json",
              R"({"_class_name": "LattePipeline", "transformer": ["diffusers", "LatteTransformer3DModel"]})");
    CHECK_THAT(input_error_message([&] { read_pipeline_index(dir.path()); }),
               Contains(file.string()) && Contains("'transformer'") && Contains("LatteTransformer3DModel") &&
                   Contains("missing"));
  }
}
