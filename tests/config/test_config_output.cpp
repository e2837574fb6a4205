// What a loaded Config gives back: typed getters and their misuse, fail(), to_yaml() round trips,
// peek_recipe_name(), and schema refinement.
#include <catch2/catch.hpp>

#include "config_test_helpers.h"
#include "tune/config/config.h"

using namespace tune::config;
using namespace tune::config::testing;

TEST_CASE("getters refuse unset keys, keys of another type and unknown keys with a UsageError", "[config]") {
  TempDir dir;
  const Config config = load(dir.write("r.yaml", "data.train: t.jsonl\n"), {}, test_schema());
  CHECK_THROWS_MATCHES(
      config.get_string("run_name"), tune::UsageError,
      Catch::Message(
          "config: get_string(\"run_name\"): the key is not set and has no default; check has(\"run_name\") first"));
  CHECK_THROWS_MATCHES(
      config.get_bool("seed"), tune::UsageError,
      Catch::Message("config: get_bool(\"seed\"): the key holds another type of value; read it with get_int"));
  CHECK_THROWS_WITH(config.get_real("model.layers"), Catch::Contains("model.layers"));
  CHECK_THROWS_WITH(config.get_int("nope"), Catch::Contains("\"nope\"") && Catch::Contains("not in this recipe"));
  CHECK_THROWS_WITH(config.get_strings("lora.layers"), Catch::Contains("lora.layers"));
  CHECK_THROWS_WITH(config.get_ints("lora.targets"), Catch::Contains("lora.targets"));
  CHECK(config.get_string("data.train") == (std::filesystem::current_path() / "t.jsonl").string());
  CHECK(config.get_strings("lora.targets") == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(config.get_ints("lora.layers") == std::vector<long long>{0, 1});
}

TEST_CASE("fail() names the key's location", "[config]") {
  TempDir dir;
  const auto file = dir.write("r.yaml", "data.train: t.jsonl\nmodel:\n  layers: 0\n");
  const Config config = load(file, {}, test_schema());
  const auto problems = problems_of([&] { config.fail("model.layers", "must be > 0"); });
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == file.string() + ":3:11: model.layers must be > 0");
  // A default has no line; the recipe file is where the user would change it.
  CHECK(problems_of([&] { config.fail("seed", "must be odd"); })[0] == file.string() + ": seed must be odd");
}

TEST_CASE("to_yaml writes nested YAML in schema order that loads back to the same entries", "[config]") {
  TempDir dir;
  const auto file = dir.write("r.yaml",
                              "data.train: train.jsonl\n"
                              "tag: '123'\n"
                              "run_name: 'true'\n"
                              "optimizer.name: \"a: b # c\"\n"
                              "optimizer.lr: 1e-4\n"
                              "lora.targets: [q_proj, '1', \"no\"]\n"
                              "mixed_precision: no\n"
                              "seed: 7\n");
  const Config config = load(file, {"model.layers=3"}, test_schema());
  const std::string yaml = config.to_yaml();
  const std::string cwd = std::filesystem::current_path().string();
  CHECK(yaml ==
        "recipe: sft\n"
        "seed: 7\n"
        "gradient_checkpointing: true\n"
        "mixed_precision: \"no\"\n"
        "optimizer:\n"
        "  name: \"a: b # c\"\n"
        "  lr: 0.0001\n"
        "  weight_decay: 0.0\n"
        "model:\n"
        "  layers: 3\n"
        "  hidden: 64\n"
        "lora:\n"
        "  targets: [q_proj, \"1\", \"no\"]\n"
        "  layers: [0, 1]\n"
        "data:\n"
        "  train: " +
            cwd +
            "/train.jsonl\n"
            "run_name: \"true\"\n"
            "tag: \"123\"\n");

  const auto resolved = dir.write("resolved.yaml", yaml);
  const Config reloaded = load(resolved, {}, test_schema());
  REQUIRE(reloaded.entries.size() == config.entries.size());
  for (const auto& [key, entry] : config.entries) {
    INFO(key);
    REQUIRE(reloaded.entries.count(key) == 1);
    CHECK(reloaded.entries.at(key).yaml == entry.yaml);
  }
  CHECK(reloaded.get_string("tag") == "123");
  CHECK(reloaded.get_string("run_name") == "true");
  CHECK(reloaded.get_string("optimizer.name") == "a: b # c");
  CHECK(reloaded.to_yaml() == yaml);
}

TEST_CASE("peek_recipe_name reads recipe after includes and overrides, without a schema", "[config]") {
  TempDir dir;
  dir.write("base.yaml", "recipe: sft\nwhatever.unknown: 1\n");
  const auto recipe = dir.write("r.yaml", "include: base.yaml\nseed: 1\n");
  CHECK(peek_recipe_name(recipe, {}) == "sft");
  CHECK(peek_recipe_name(recipe, {"recipe=latte"}) == "latte");
  // Where the name was written, for "unknown recipe" errors (recipes::find_recipe): the included file's line.
  CHECK(peek_recipe_name(recipe, {}).location.to_string() == (dir.path() / "base.yaml").string() + ":1:9");
  CHECK(peek_recipe_name(recipe, {"recipe=latte"}).location.to_string() == "command line (recipe=latte)");

  const auto without = dir.write("none.yaml", "seed: 1\n");
  const auto problems = problems_of([&] { peek_recipe_name(without, {}); });
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Catch::StartsWith(without.string() + ": no `recipe:` key"));

  const auto missing = dir.path() / "missing.yaml";
  CHECK(problems_of([&] { peek_recipe_name(missing, {}); })[0] == missing.string() + ": no such file");
  const auto broken = dir.write("broken.yaml", "recipe: [sft\n");
  CHECK_THAT(problems_of([&] { peek_recipe_name(broken, {}); })[0],
             Catch::StartsWith(broken.string() + ":2:1: YAML syntax error: "));
}

TEST_CASE("a schema key added twice is refined in place", "[config]") {
  Schema schema = test_schema();
  const std::size_t count = schema.keys().size();
  schema.integer("seed", 42, "refined");
  REQUIRE(schema.keys().size() == count);
  CHECK(schema.keys()[1].key == "seed");
  CHECK(schema.find("seed")->default_value == "42");
  CHECK(schema.find("optimizer.lr")->default_value == "0.0003");
  CHECK(schema.find("lora.targets")->default_value == "[q_proj, v_proj]");
  CHECK(schema.find("nope") == nullptr);
}
