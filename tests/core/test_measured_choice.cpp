// The timed choice between kernels and its cache file (core/measured_choice.h), with a fake clock: each candidate
// "takes" a set number of fake seconds, so the choice and the use of the cache are checked without timing noise.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

#include "common/scoped_env.h"
#include "tune/core/measured_choice.h"

namespace {

using tune::ChoiceCache;
using tune::MeasuredChoice;
using tune::TimedCandidate;

// A clock that only moves when a candidate runs: by the seconds given for that candidate.
struct FakeTime {
  double now = 0.0;
  std::map<std::string, int> runs;
  tune::SecondsClock clock() {
    return [this] { return now; };
  }
  TimedCandidate candidate(const std::string& name, double seconds) {
    return {name, [this, name, seconds] {
              now += seconds;
              ++runs[name];
            }};
  }
};

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("tune_measured_choice_" + std::to_string(getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("measured choice: the faster candidate wins, with every candidate's best time", "[measured_choice]") {
  FakeTime time;
  const MeasuredChoice choice =
      tune::measure_fastest({time.candidate("slow", 0.004), time.candidate("fast", 0.001)}, time.clock());
  CHECK(choice.chosen == "fast");
  CHECK_FALSE(choice.from_cache);
  REQUIRE(choice.timings.size() == 2);
  CHECK(choice.timings[0].name == "slow");
  CHECK(choice.timings[0].seconds == Approx(0.004));
  CHECK(choice.timings[1].seconds == Approx(0.001));
  // One warm-up run, then interleaved timed runs until each ran 15 ms in all (and at least 3 times): "fast" needs
  // about 15 runs of 1 ms (16 where the sum of fifteen 0.001s rounds below 0.015), so both ran 16 or 17 times.
  CHECK(time.runs["fast"] == time.runs["slow"]);
  CHECK(time.runs["fast"] >= 16);
  CHECK(time.runs["fast"] <= 17);
}

TEST_CASE("measured choice: the default (first) candidate is kept within the noise margin", "[measured_choice]") {
  FakeTime time;
  CHECK(tune::measure_fastest({time.candidate("default", 0.0100), time.candidate("other", 0.0098)}, time.clock())
            .chosen == "default");
  CHECK(tune::measure_fastest({time.candidate("default", 0.0100), time.candidate("other", 0.0090)}, time.clock())
            .chosen == "other");
  tune::MeasureOptions wide;
  wide.keep_default_within = 0.15;
  CHECK(tune::measure_fastest({time.candidate("default", 0.0100), time.candidate("other", 0.0090)}, time.clock(), wide)
            .chosen == "default");
}

TEST_CASE("measured choice: the cache answers later asks without running a candidate", "[measured_choice]") {
  const ChoiceCache cache(fresh_dir("reuse") / "sub" / "cpu_kernels.json");
  FakeTime first;
  const MeasuredChoice measured = tune::choose_fastest(
      "ctx | question", {first.candidate("a", 0.003), first.candidate("b", 0.001)}, cache, first.clock());
  CHECK(measured.chosen == "b");
  CHECK_FALSE(measured.from_cache);
  REQUIRE(std::filesystem::exists(cache.file()));

  // A later process with other timings: the cached answer stands and nothing runs.
  FakeTime later;
  const MeasuredChoice cached = tune::choose_fastest(
      "ctx | question", {later.candidate("a", 0.001), later.candidate("b", 0.003)}, cache, later.clock());
  CHECK(cached.chosen == "b");
  CHECK(cached.from_cache);
  CHECK(later.runs.empty());
  REQUIRE(cached.timings.size() == 2);

  // Another question is measured and stored beside the first.
  const MeasuredChoice other = tune::choose_fastest(
      "ctx | other question", {later.candidate("a", 0.001), later.candidate("b", 0.003)}, cache, later.clock());
  CHECK(other.chosen == "a");
  CHECK_FALSE(other.from_cache);
  std::ifstream in(cache.file());
  const auto json = nlohmann::json::parse(in);
  CHECK(json["choices"]["ctx | question"]["chosen"] == "b");
  CHECK(json["choices"]["ctx | other question"]["chosen"] == "a");
}

TEST_CASE("measured choice: a cached name no candidate has is measured again", "[measured_choice]") {
  const ChoiceCache cache(fresh_dir("stale") / "cpu_kernels.json");
  FakeTime time;
  tune::choose_fastest("key", {time.candidate("old", 0.001), time.candidate("b", 0.002)}, cache, time.clock());
  FakeTime renamed;
  const MeasuredChoice choice =
      tune::choose_fastest("key", {renamed.candidate("new", 0.001), renamed.candidate("b", 0.002)}, cache, renamed.clock());
  CHECK(choice.chosen == "new");
  CHECK_FALSE(choice.from_cache);
  CHECK(renamed.runs["new"] > 0);
}

TEST_CASE("measured choice: a damaged cache file is measured over and rewritten", "[measured_choice]") {
  const auto file = fresh_dir("damaged") / "cpu_kernels.json";
  std::ofstream(file) << "{ not json";
  const ChoiceCache cache(file);
  FakeTime time;
  CHECK(tune::choose_fastest("key", {time.candidate("a", 0.002), time.candidate("b", 0.001)}, cache, time.clock())
            .chosen == "b");
  std::ifstream in(file);
  const auto json = nlohmann::json::parse(in);
  CHECK(json["choices"]["key"]["chosen"] == "b");
}

TEST_CASE("measured choice: an unwritable cache or none at all still chooses", "[measured_choice]") {
  const auto dir = fresh_dir("unwritable");
  std::ofstream(dir / "a-file") << "x";
  // Its directory would have to be a regular file: neither the lock nor the cache can be created.
  for (const ChoiceCache& cache : {ChoiceCache(dir / "a-file" / "cpu_kernels.json"), ChoiceCache({})}) {
    FakeTime time;
    const MeasuredChoice choice =
        tune::choose_fastest("key", {time.candidate("a", 0.002), time.candidate("b", 0.001)}, cache, time.clock());
    CHECK(choice.chosen == "b");
    CHECK_FALSE(choice.from_cache);
    CHECK_FALSE(cache.find("key").has_value());
  }
}

TEST_CASE("measured choice: the cache file's place follows TUNE_CACHE_DIR, XDG_CACHE_HOME, HOME", "[measured_choice]") {
  const tune::testing::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
  const tune::testing::ScopedEnv home("HOME", "/home/u");
  {
    const tune::testing::ScopedEnv tune_dir("TUNE_CACHE_DIR", "/c");
    CHECK(tune::default_kernel_cache_file() == std::filesystem::path("/c/cpu_kernels.json"));
  }
  const tune::testing::ScopedEnv no_tune_dir("TUNE_CACHE_DIR", std::nullopt);
  CHECK(tune::default_kernel_cache_file() == std::filesystem::path("/xdg/tune/cpu_kernels.json"));
  const tune::testing::ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
  CHECK(tune::default_kernel_cache_file() == std::filesystem::path("/home/u/.cache/tune/cpu_kernels.json"));
  CHECK(tune::cpu_kernel_context().find("threads | LibTorch ") != std::string::npos);
}
