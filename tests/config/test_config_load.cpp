// Reading config files: nested and dotted keys, include order, overrides, include errors and syntax errors, and
// the bounds on what counts as a config file (regular, at most 1 MiB).
#include <algorithm>
#include <fmt/format.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "config_test_helpers.h"
#include "tune/config/config.h"

using namespace tune::config;
using namespace tune::config::testing;

namespace {

const std::string kTrain = "data.train: train.jsonl\n";

}  // namespace

TEST_CASE("nested maps and dotted keys name the same setting", "[config]") {
  TempDir dir;
  const auto file = dir.write("r.yaml", kTrain +
                                            "optimizer:\n"
                                            "  lr: 0.5\n"
                                            "model.layers: 7\n"
                                            "model:\n"
                                            "  hidden: 32\n");
  const Config config = load(file, {}, test_schema());
  CHECK(config.get_real("optimizer.lr") == 0.5);
  CHECK(config.get_int("model.layers") == 7);
  CHECK(config.get_int("model.hidden") == 32);
  CHECK(config.where("optimizer.lr").to_string() == file.string() + ":3:7");
  CHECK(config.where("model.layers").to_string() == file.string() + ":4:15");
  CHECK(config.where("seed").file.empty());  // a default
  CHECK(config.where("seed").to_string() == "default");

  SECTION("a key written both ways in one file is reported, not silently resolved") {
    const auto twice = dir.write("twice.yaml", kTrain + "optimizer.lr: 0.1\noptimizer:\n  lr: 0.2\n");
    const auto problems = load_problems(twice);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] ==
          twice.string() + ":4:3: optimizer.lr is set twice (first at " + twice.string() + ":2:1); keep one of them");
  }
}

TEST_CASE("included files load first, in order, and the including file wins", "[config]") {
  TempDir dir;
  dir.write("first.yaml", "optimizer.lr: 0.1\nseed: 1\nmodel:\n  layers: 3\n  hidden: 96\n");
  const auto second = dir.write("second.yaml", "optimizer:\n  lr: 0.2\n");
  const auto recipe = dir.write("r.yaml", "include: [first.yaml, second.yaml]\n" + kTrain +
                                              "seed: 5\n"
                                              "model.layers: 4\n");
  const Config config = load(recipe, {}, test_schema());
  CHECK(config.get_real("optimizer.lr") == 0.2);  // the later include wins over the earlier
  CHECK(config.where("optimizer.lr").to_string() == second.string() + ":2:7");
  CHECK(config.get_int("seed") == 5);  // the file's own key wins over its includes
  CHECK(config.get_int("model.layers") == 4);
  CHECK(config.get_int("model.hidden") == 96);  // deep merge: a sibling from the include survives

  SECTION("a command-line override wins over every file") {
    const Config overridden = load(recipe, {"optimizer.lr=0.7", "seed=9"}, test_schema());
    CHECK(overridden.get_real("optimizer.lr") == 0.7);
    CHECK(overridden.get_int("seed") == 9);
    CHECK(overridden.where("seed").to_string() == "command line (seed=9)");
    CHECK(overridden.where("seed").file == "command line");
  }

  SECTION("a single string include works like a one-element list") {
    const auto single = dir.write("single.yaml", "include: second.yaml\n" + kTrain);
    CHECK(load(single, {}, test_schema()).get_real("optimizer.lr") == 0.2);
  }
}

TEST_CASE("includes chain through two levels, each relative to its own file", "[config]") {
  TempDir dir;
  dir.write("presets/base/leaf.yaml", "seed: 1\nmodel.layers: 1\nmodel.hidden: 16\n");
  dir.write("presets/middle.yaml", "include: base/leaf.yaml\nmodel.layers: 2\n");
  const auto recipe = dir.write("recipes/r.yaml", "include: ../presets/middle.yaml\n" + kTrain + "seed: 3\n");
  const Config config = load(recipe, {}, test_schema());
  CHECK(config.get_int("seed") == 3);
  CHECK(config.get_int("model.layers") == 2);
  CHECK(config.get_int("model.hidden") == 16);
}

TEST_CASE("includes not found beside the file are looked up in the shipped configs/ directory", "[config]") {
  TempDir home;
  home.write("configs/optim/fast.yaml", "optimizer.lr: 0.25\nseed: 11\n");
  const ScopedEnv tune_home("TUNE_HOME", home.path().string());

  TempDir work;
  const auto recipe = work.write("r.yaml", "include: [optim/fast.yaml]\n" + kTrain);
  const Config config = load(recipe, {}, test_schema());
  CHECK(config.get_real("optimizer.lr") == 0.25);
  CHECK(config.get_int("seed") == 11);

  SECTION("a file beside the including file takes precedence over configs/") {
    work.write("optim/fast.yaml", "optimizer.lr: 0.5\n");
    CHECK(load(recipe, {}, test_schema()).get_real("optimizer.lr") == 0.5);
  }
}

TEST_CASE("include cycles and missing includes name the include entry", "[config]") {
  TempDir dir;
  SECTION("two files including each other") {
    const auto a = dir.write("a.yaml", "include: [b.yaml]\n" + kTrain);
    const auto b = dir.write("b.yaml", "seed: 1\ninclude:\n  - a.yaml\n");
    const auto problems = load_problems(a);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Catch::StartsWith(b.string() + ":3:5: include cycle: "));
    CHECK_THAT(problems[0], Catch::Contains("a.yaml -> "));
    CHECK_THAT(problems[0], Catch::Contains("b.yaml -> "));
  }
  SECTION("a file including itself") {
    const auto self = dir.write("self.yaml", kTrain + "include: self.yaml\n");
    const auto problems = load_problems(self);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Catch::StartsWith(self.string() + ":2:10: include cycle: "));
  }
  SECTION("the same file included twice without a cycle is fine") {
    dir.write("leaf.yaml", "seed: 4\n");
    dir.write("left.yaml", "include: leaf.yaml\n");
    const auto recipe = dir.write("diamond.yaml", "include: [left.yaml, leaf.yaml]\n" + kTrain);
    CHECK(load(recipe, {}, test_schema()).get_int("seed") == 4);
  }
  SECTION("a missing include") {
    const ScopedEnv tune_home("TUNE_HOME", dir.path().string());
    const auto recipe = dir.write("r.yaml", kTrain + "include:\n  - there.yaml\n  - nowhere.yaml\n");
    dir.write("there.yaml", "seed: 1\n");
    const auto problems = load_problems(recipe);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Catch::StartsWith(recipe.string() + ":4:5: included file 'nowhere.yaml' not found"));
    CHECK_THAT(problems[0], Catch::Contains((dir.path() / "configs" / "nowhere.yaml").string()));
  }
}

TEST_CASE("overrides set scalars and flow lists, and are checked like file values", "[config]") {
  TempDir dir;
  const auto recipe = dir.write("r.yaml", kTrain + "lora.targets: [a]\n");

  const Config config =
      load(recipe, {"model.layers=6", "lora.targets=[q_proj,k_proj]", "lora.layers=[3, 4]", "optimizer={lr: 0.01}"},
           test_schema());
  CHECK(config.get_int("model.layers") == 6);
  CHECK(config.get_strings("lora.targets") == std::vector<std::string>{"q_proj", "k_proj"});
  CHECK(config.get_ints("lora.layers") == std::vector<long long>{3, 4});
  CHECK(config.get_real("optimizer.lr") == 0.01);
  CHECK(config.where("lora.targets").to_string() == "command line (lora.targets=[q_proj,k_proj])");

  SECTION("an unknown override key suggests the nearest known key") {
    const auto problems = load_problems(recipe, {"optimzer.lr=1"});
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "command line (optimzer.lr=1): unknown key 'optimzer.lr'; did you mean 'optimizer.lr'?");
  }
  SECTION("an override without '=' is refused") {
    const auto problems = load_problems(recipe, {"model.layers"});
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "command line (model.layers): an override must be key=value, like optimizer.lr=1e-4");
  }
  SECTION("a badly typed override names the override") {
    const auto problems = load_problems(recipe, {"model.layers=many"});
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "command line (model.layers=many): model.layers: expected an integer, got 'many'");
  }
  SECTION("an override value that is not YAML is a problem, not a yaml-cpp exception") {
    const auto problems = load_problems(recipe, {"lora.targets=[a"});
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Catch::StartsWith("command line (lora.targets=[a): YAML syntax error in the value"));
  }
}

TEST_CASE("YAML syntax errors and missing files become ConfigErrors with a location", "[config]") {
  TempDir dir;
  SECTION("syntax error in the recipe") {
    const auto recipe = dir.write("r.yaml", "seed: 1\nlora.targets: [a,\nmodel.layers: 2\n");
    const auto problems = load_problems(recipe);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == recipe.string() + ":4:1: YAML syntax error: end of sequence flow not found");
  }
  SECTION("syntax error in an included file names that file") {
    const auto broken = dir.write("broken.yaml", "seed: 1\n  model: 2\n");
    const auto recipe = dir.write("r.yaml", "include: broken.yaml\n" + kTrain);
    const auto problems = load_problems(recipe);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == broken.string() + ":2:8: YAML syntax error: illegal map value");
  }
  SECTION("a missing recipe file") {
    const auto missing = dir.path() / "missing.yaml";
    const auto problems = load_problems(missing);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == missing.string() + ": no such file");
  }
  SECTION("a top level that is not a map") {
    const auto recipe = dir.write("r.yaml", "- seed\n- 1\n");
    const auto problems = load_problems(recipe);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Catch::StartsWith(recipe.string() + ":1:1: expected settings as `key: value` lines"));
  }
}

TEST_CASE("included and top-level files must be regular files of at most 1 MiB", "[config]") {
  TempDir dir;
  constexpr size_t kLimit = size_t{1} << 20;
  // Each of these used to end in std::bad_alloc (/dev/zero) or never end (/dev/urandom, a FIFO with no writer).
  SECTION("devices and FIFOs are refused at the include entry, before anything is read") {
    const auto fifo = dir.path() / "pipe.yaml";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    for (const std::string& device : std::vector<std::string>{"/dev/zero", "/dev/urandom", fifo.string()}) {
      INFO(device);
      if (!fs::exists(device)) continue;
      const auto recipe = dir.write("r.yaml", kTrain + "include: [" + device + "]\n");
      const auto problems = load_problems(recipe);
      REQUIRE(problems.size() == 1);
      CHECK_THAT(problems[0], Catch::StartsWith(recipe.string() + ":2:11: included file '" + device + "' is a "));
      CHECK_THAT(problems[0], Catch::Contains("is a character device") || Catch::Contains("is a FIFO"));
      CHECK_THAT(problems[0], Catch::EndsWith("expected a YAML file of at most 1 MiB"));
    }
  }
  SECTION("a file over 1 MiB is refused, included or not; one of exactly 1 MiB loads") {
    const std::string padding = "# padding\n";
    std::string exact = kTrain + "seed: 7\n";
    while (exact.size() + padding.size() <= kLimit) exact += padding;
    exact += std::string(kLimit - exact.size() - 1, '#') + "\n";
    REQUIRE(exact.size() == kLimit);
    const auto fits = dir.write("fits.yaml", exact);
    CHECK(load(fits, {}, test_schema()).get_int("seed") == 7);

    const auto big = dir.write("big.yaml", exact + "\n");
    const auto top_problems = load_problems(big);
    REQUIRE(top_problems.size() == 1);
    CHECK(top_problems[0] == fmt::format("{}: is {} bytes; expected a YAML file of at most 1 MiB", big.string(), kLimit + 1));

    const auto recipe = dir.write("r.yaml", kTrain + "include:\n  - big.yaml\n");
    const auto problems = load_problems(recipe);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == fmt::format("{}:3:5: included file '{}' is {} bytes; expected a YAML file of at most 1 MiB",
                                     recipe.string(), big.string(), kLimit + 1));
  }
  SECTION("a top-level device is refused by name") {
    const auto problems = load_problems("/dev/zero");
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "/dev/zero: is a character device; expected a YAML file of at most 1 MiB");
  }
}

// Found by fuzz/config_fuzzer.cpp: to yaml-cpp an alias inside its own anchor is a map that contains itself, and
// flattening it into dotted keys recursed until the stack overflowed.
TEST_CASE("a YAML map that contains itself is a problem, not a stack overflow", "[config]") {
  TempDir dir;
  const auto recipe = dir.write("r.yaml", kTrain + "model: &m\n  layers: 2\n  again: *m\n");
  const auto problems = load_problems(recipe);
  const auto deep = std::find_if(problems.begin(), problems.end(), [](const std::string& problem) {
    return problem.find("nests more than 32 levels deep (a YAML alias inside its own anchor?)") != std::string::npos;
  });
  REQUIRE(deep != problems.end());
  CHECK_THAT(*deep, Catch::StartsWith(recipe.string() + ":"));
}
