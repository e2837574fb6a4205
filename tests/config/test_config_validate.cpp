// Checking values against the schema: types with exact locations, choices, required keys, unknown keys,
// path resolution and null.
#include <catch2/catch.hpp>

#include "config_test_helpers.h"
#include "tune/config/config.h"

using namespace tune::config;
using namespace tune::config::testing;

namespace {

const std::string kTrain = "data.train: train.jsonl\n";

// The single problem of loading `yaml` (written after a valid data.train line, so the text starts on line 2).
std::string only_problem(const TempDir& dir, const std::string& yaml) {
  const auto file = dir.write("r.yaml", kTrain + yaml);
  const auto problems = load_problems(file);
  REQUIRE(problems.size() == 1);
  const std::string prefix = file.string() + ":";
  REQUIRE(problems[0].rfind(prefix, 0) == 0);
  return problems[0].substr(prefix.size());  // "line:col: message"
}

}  // namespace

TEST_CASE("each wrong type is reported at the value's line and column", "[config]") {
  TempDir dir;
  CHECK(only_problem(dir, "gradient_checkpointing: yes\n") ==
        "2:25: gradient_checkpointing: expected true or false, got 'yes'");
  CHECK(only_problem(dir, "gradient_checkpointing: \"true\"\n") ==
        "2:25: gradient_checkpointing: expected true or false, got the quoted string \"true\"; remove the quotes");
  CHECK(only_problem(dir, "model:\n  layers: 1.5\n") ==
        "3:11: model.layers: expected an integer, got '1.5'; write a whole number");
  CHECK(only_problem(dir, "model.layers: abc\n") == "2:15: model.layers: expected an integer, got 'abc'");
  CHECK(only_problem(dir, "model.layers: \"4\"\n") ==
        "2:15: model.layers: expected an integer, got the quoted string \"4\"; remove the quotes");
  CHECK(only_problem(dir, "model.layers: 99999999999999999999\n") ==
        "2:15: model.layers: expected an integer, got '99999999999999999999'; it is out of the 64-bit range");
  CHECK(only_problem(dir, "optimizer.lr: fast\n") == "2:15: optimizer.lr: expected a number, got 'fast'");
  CHECK(only_problem(dir, "optimizer.lr: '1e-4'\n") ==
        "2:15: optimizer.lr: expected a number, got the quoted string \"1e-4\"; remove the quotes");
  CHECK(only_problem(dir, "model.path: [a, b]\n") == "2:13: model.path: expected a path, got the list [a, b]");
  CHECK(only_problem(dir, "lora.targets: q_proj\n") ==
        "2:15: lora.targets: expected a list of strings, like [a, b], got 'q_proj'; write a list, like [q_proj]");
  CHECK(only_problem(dir, "lora.layers: [1, two, 3]\n") ==
        "2:18: lora.layers: every element must be an integer, got 'two'");
  CHECK(only_problem(dir, "lora:\n  targets: [a, [b]]\n") ==
        "3:16: lora.targets: every element must be a string, got the list [b]");
}

TEST_CASE("a map where a single value belongs, and a value where a section belongs", "[config]") {
  TempDir dir;
  CHECK(only_problem(dir, "optimizer:\n  lr:\n    value: 1\n    warmup: 2\n") ==
        "3:3: optimizer.lr: expected a number, got a map of nested keys; optimizer.lr takes a single value");
  CHECK(only_problem(dir, "tag: {a: 1}\n") ==
        "2:1: tag: expected a string, got a map of nested keys; tag takes a single value");
  CHECK(only_problem(dir, "optimizer: adam\n") ==
        "2:12: optimizer is a section with the keys optimizer.name, optimizer.lr, optimizer.weight_decay, not a "
        "single value; got 'adam'; write nested keys instead, like optimizer.name: ...");
}

TEST_CASE("accepted spellings of numbers and booleans", "[config]") {
  TempDir dir;
  const auto file = dir.write("r.yaml", kTrain +
                                            "optimizer.lr: 1e-4\n"
                                            "optimizer.weight_decay: 2\n"
                                            "model.layers: -3\n"
                                            "gradient_checkpointing: false\n"
                                            "mixed_precision: no\n"
                                            "tag: 123\n");
  const Config config = load(file, {}, test_schema());
  CHECK(config.get_real("optimizer.lr") == 1e-4);
  CHECK(config.get_real("optimizer.weight_decay") == 2.0);  // a real accepts an integer
  CHECK(config.get_int("model.layers") == -3);
  CHECK_FALSE(config.get_bool("gradient_checkpointing"));
  CHECK(config.get_string("mixed_precision") == "no");  // a string, not YAML 1.1's boolean false
  CHECK(config.get_string("tag") == "123");
}

TEST_CASE("a value outside the choices lists the choices", "[config]") {
  TempDir dir;
  CHECK(only_problem(dir, "mixed_precision: fp8\n") ==
        "2:18: mixed_precision: 'fp8' is not one of the choices: bf16, fp16, no");
}

TEST_CASE("a missing required key names the recipe file", "[config]") {
  TempDir dir;
  const auto file = dir.write("r.yaml", "seed: 1\n");
  const auto problems = load_problems(file);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == file.string() +
                           ": missing required key 'data.train' (training JSONL); add it to the file or pass "
                           "data.train=VALUE");
  CHECK(load(file, {"data.train=x.jsonl"}, test_schema()).has("data.train"));
}

TEST_CASE("unknown keys suggest the nearest known key", "[config]") {
  TempDir dir;
  CHECK(only_problem(dir, "optimizer:\n  lrr: 1\n") ==
        "3:3: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?");
  CHECK(only_problem(dir, "gradient_checkpoint: true\n") ==
        "2:1: unknown key 'gradient_checkpoint'; did you mean 'gradient_checkpointing'?");
  CHECK(only_problem(dir, "hidden: 3\n") == "2:1: unknown key 'hidden'; did you mean 'model.hidden'?");
  // Two keys end in "layers": no guess between them.
  CHECK(only_problem(dir, "layers: 3\n") == "2:1: unknown key 'layers': this recipe has no such setting; remove it");
  CHECK(only_problem(dir, "completely_different: 3\n") ==
        "2:1: unknown key 'completely_different': this recipe has no such setting; remove it");
  CHECK(only_problem(dir, "nothing_here: {}\n") ==
        "2:1: unknown key 'nothing_here': this recipe has no such setting; remove it");
}

TEST_CASE("all problems of a config are reported together, one per line", "[config]") {
  TempDir dir;
  const auto file = dir.write("r.yaml",
                              "seed: 1.5\n"
                              "optimzer:\n"
                              "  lr: 1\n"
                              "mixed_precision: fp32\n"
                              "lora.targets: q_proj\n");
  const auto problems = load_problems(file);
  REQUIRE(problems.size() == 5);
  const std::string f = file.string();
  CHECK(problems[0] == f + ":1:7: seed: expected an integer, got '1.5'; write a whole number");
  CHECK(problems[1] == f + ":3:3: unknown key 'optimzer.lr'; did you mean 'optimizer.lr'?");
  CHECK(problems[2] == f + ":4:18: mixed_precision: 'fp32' is not one of the choices: bf16, fp16, no");
  CHECK_THAT(problems[3], Catch::StartsWith(f + ":5:15: lora.targets: expected a list of strings"));
  CHECK_THAT(problems[4], Catch::StartsWith(f + ": missing required key 'data.train'"));

  try {
    load(file, {}, test_schema());
  } catch (const ConfigError& error) {
    std::string expected;
    for (const auto& problem : problems) expected += (expected.empty() ? "" : "\n") + problem;
    CHECK(std::string(error.what()) == expected);
    CHECK(error.exit_code() == 2);  // a usage error for the CLI
  }
}

TEST_CASE("paths become absolute relative to the current directory, without expanding ~", "[config]") {
  TempDir dir;
  const auto cwd = std::filesystem::current_path();
  const auto file = dir.write("sub/r.yaml", "data.train: data/./train.jsonl\nmodel.path: ~/models\n");
  Config config = load(file, {}, test_schema());
  CHECK(config.get_string("data.train") == (cwd / "data" / "train.jsonl").string());
  CHECK(config.get_string("model.path") == (cwd / "~" / "models").string());

  config = load(file, {"data.train=/abs/train.jsonl"}, test_schema());
  CHECK(config.get_string("data.train") == "/abs/train.jsonl");
  CHECK(only_problem(dir, "model.path: ''\n") ==
        "2:13: model.path: expected a path, got the quoted string \"\"; give a file or directory name");
}

TEST_CASE("null leaves an optional key unset and is refused for keys with a default", "[config]") {
  TempDir dir;
  dir.write("base.yaml", "run_name: from-base\nmodel.path: somewhere\n");
  const auto file = dir.write("r.yaml", "include: base.yaml\n" + kTrain + "run_name: ~\nmodel.path:\n");
  const Config config = load(file, {}, test_schema());
  CHECK_FALSE(config.has("run_name"));  // a later null unsets what an include set
  CHECK_FALSE(config.has("model.path"));
  CHECK_FALSE(load(file, {"run_name=null"}, test_schema()).has("run_name"));
  CHECK(load(file, {"run_name=\"null\""}, test_schema()).get_string("run_name") == "null");

  CHECK(only_problem(dir, "seed: ~\n") ==
        "2:7: seed: expected an integer, got null; remove the line to use the default (0)");
  CHECK(only_problem(dir, "tag: null\n") ==
        "2:6: tag: expected a string, got null; remove the line to use the default (none)");
  const auto required = dir.write("required.yaml", "data.train:\n");
  const auto problems = load_problems(required);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == required.string() +
                           ":1:1: data.train: expected a path, got null; this key is required, "
                           "so give it a value");
}
