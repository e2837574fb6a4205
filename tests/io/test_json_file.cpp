// io::read_json_file, which reads config.json, generation_config.json, latents.json and the run's JSON files: every
// way a file can fail to be JSON is an InputError naming the file.
#include <catch2/catch.hpp>

#include "io_test_helpers.h"
#include "tune/io/json_file.h"

using Catch::Contains;
using tune::io::read_json_file;
using tune::io::testing::input_error_message;
using tune::io::testing::ScratchDir;

TEST_CASE("read_json_file names the file for every kind of bad JSON", "[io][json]") {
  ScratchDir dir;
  const auto path = dir / "config.json";
  SECTION("a syntax error") { std::ofstream(path) << R"({"a": )"; }
  // What fuzz/safetensors_fuzzer.cpp found in the safetensors header, here too: nlohmann reports a number beyond
  // double's range as out_of_range, not parse_error, and it escaped as an "internal error" naming no file.
  SECTION("a number too large for a double") { std::ofstream(path) << R"({"rope_theta": 1e999})"; }
  CHECK_THAT(input_error_message([&] { read_json_file(path, "the model's config.json"); }),
             Contains("config.json") && Contains("invalid JSON"));
}

TEST_CASE("read_json_file names a missing file", "[io][json]") {
  ScratchDir dir;
  CHECK_THAT(input_error_message([&] { read_json_file(dir / "absent.json", "the latents manifest"); }),
             Contains("absent.json") && Contains("cannot open the latents manifest"));
}
