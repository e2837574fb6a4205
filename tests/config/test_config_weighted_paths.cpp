// Weighted path lists (data.train): one path as before, or a list of paths and {path, weight} mappings; element
// problems at the element's own line and column; canonical text that reads back the same.
#include <catch2/catch.hpp>

#include "config_test_helpers.h"
#include "tune/config/config.h"

using namespace tune::config;
using namespace tune::config::testing;

namespace {

Schema weighted_schema() {
  Schema schema = test_schema();
  schema.required_weighted_paths("data.train", "training files");
  return schema;
}

std::vector<std::string> problems_loading(const fs::path& file, const std::vector<std::string>& overrides = {}) {
  return problems_of([&] { load(file, overrides, weighted_schema()); });
}

std::string absolute(const std::string& path) { return (fs::current_path() / path).lexically_normal().string(); }

}  // namespace

TEST_CASE("a single path reads and prints as a path key did", "[config][weighted]") {
  TempDir dir;
  const Config config = load(dir.write("r.yaml", "data.train: data/./t.jsonl\n"), {}, weighted_schema());
  const auto files = config.get_weighted_paths("data.train");
  REQUIRE(files.size() == 1);
  CHECK(files[0].path == absolute("data/t.jsonl"));
  CHECK(files[0].weight == 1.0);
  CHECK_THAT(config.to_yaml(), Catch::Contains("  train: " + absolute("data/t.jsonl") + "\n"));
  CHECK_THROWS_AS(config.get_string("data.train"), tune::UsageError);  // the typed getter is get_weighted_paths
}

TEST_CASE("a list of paths and {path, weight} mappings, in block or flow style", "[config][weighted]") {
  TempDir dir;
  const auto file = dir.write("r.yaml",
                              "data:\n"
                              "  train:\n"
                              "    - a.jsonl\n"
                              "    - {path: b.json, weight: 0.5}\n"
                              "    - path: /abs/c.txt\n"
                              "      weight: 3\n"
                              "    - path: d.jsonl\n");
  const Config config = load(file, {}, weighted_schema());
  const auto files = config.get_weighted_paths("data.train");
  REQUIRE(files.size() == 4);
  CHECK(files[0].path == absolute("a.jsonl"));
  CHECK(files[0].weight == 1.0);
  CHECK(files[1].path == absolute("b.json"));
  CHECK(files[1].weight == 0.5);
  CHECK(files[2].path == "/abs/c.txt");
  CHECK(files[2].weight == 3.0);
  CHECK(files[3].weight == 1.0);
  // Written back as a flow list (a mapping only where a weight was given), which loads to the same value.
  const std::string yaml = config.to_yaml();
  CHECK_THAT(yaml, Catch::Contains("train: [" + absolute("a.jsonl") + ", {path: " + absolute("b.json") +
                                   ", weight: 0.5}, {path: /abs/c.txt, weight: 3.0}, " + absolute("d.jsonl") + "]"));
  const Config again = load(dir.write("resolved.yaml", yaml), {}, weighted_schema());
  CHECK(again.to_yaml() == yaml);

  // The command line takes the same syntax.
  const Config overridden =
      load(file, {"data.train=[x.jsonl, {path: y.jsonl, weight: 2}]"}, weighted_schema());
  const auto from_override = overridden.get_weighted_paths("data.train");
  REQUIRE(from_override.size() == 2);
  CHECK(from_override[1].path == absolute("y.jsonl"));
  CHECK(from_override[1].weight == 2.0);
}

TEST_CASE("bad elements are reported at their own file:line:col", "[config][weighted]") {
  TempDir dir;
  const auto file = dir.write("r.yaml",
                              "data:\n"
                              "  train:\n"
                              "    - a.jsonl\n"
                              "    - {path: b.json, weight: 0}\n"
                              "    - {path: c.json, wieght: 2}\n"
                              "    - {weight: 2}\n"
                              "    - [nested]\n"
                              "    - path: e.json\n"
                              "      weight: \"2\"\n"
                              "    - {path: f.json, weight: lots}\n");
  const auto problems = problems_loading(file);
  const std::string f = file.string();
  REQUIRE(problems.size() == 6);
  CHECK(problems[0] == f + ":4:30: data.train[1].weight: expected a number > 0, got '0'");
  CHECK(problems[1] == f + ":5:22: data.train[2]: unknown key 'wieght' (did you mean 'weight'?); a file entry "
                           "takes path and weight");
  CHECK(problems[2] == f + ":6:7: data.train[3]: missing path; write {path: FILE, weight: W}");
  CHECK(problems[3] == f + ":7:7: data.train[4]: expected a path or a {path: FILE, weight: W} mapping, got a list");
  CHECK(problems[4] == f + ":9:15: data.train[5].weight: expected a number > 0, got the quoted string \"2\"");
  CHECK(problems[5] == f + ":10:30: data.train[6].weight: expected a number > 0, got 'lots'");
}

TEST_CASE("empty lists, null and wrong shapes are refused", "[config][weighted]") {
  TempDir dir;
  auto one = [&](const std::string& yaml) {
    const auto problems = problems_loading(dir.write("r.yaml", yaml));
    REQUIRE(problems.size() == 1);
    return problems[0];
  };
  CHECK_THAT(one("data.train: []\n"), Catch::Contains(":1:13: data.train: expected at least one file"));
  CHECK_THAT(one("data.train:\n"), Catch::Contains("data.train: expected a path, or a list of paths and {path, "
                                                   "weight} mappings, got null; this key is required"));
  CHECK_THAT(one("data.train: [a.jsonl, \"\"]\n"), Catch::Contains(":1:23: data.train[1]: expected a path"));
  CHECK_THAT(one("data.train: [{path: [a]}]\n"), Catch::Contains("data.train[0].path: expected a path, got a list"));
  const auto from_override = problems_of([&] {
    load(dir.write("ok.yaml", "data.train: a.jsonl\n"), {"data.train=[{path: a, weight: -1}]"}, weighted_schema());
  });
  REQUIRE(from_override.size() == 1);
  CHECK(from_override[0] ==
        "command line (data.train=[{path: a, weight: -1}]): data.train[0].weight: expected a number > 0, got '-1'");
}

TEST_CASE("a folder or a glob pattern stands for its files, in byte order, each with the entry's weight",
          "[config][weighted]") {
  TempDir dir;
  for (const char* name : {"data/b.jsonl", "data/a.jsonl", "data/B.json", "data/sub/c.txt", "data/.hidden.jsonl",
                           "data/.cache/d.jsonl", "data/notes.md", "data/x[1].jsonl", "other/e.jsonl",
                           "runs[2024]/f.jsonl"}) {
    dir.write(name, "{}\n");
  }
  const std::string data = (dir / "data").string();
  const std::vector<std::string> folder_files = {data + "/B.json", data + "/a.jsonl", data + "/b.jsonl",
                                                 data + "/sub/c.txt", data + "/x[1].jsonl"};
  const auto paths_of = [](const Config& config) {
    std::vector<std::string> paths;
    for (const auto& file : config.get_weighted_paths("data.train")) paths.push_back(file.path);
    return paths;
  };
  SECTION("a folder: every .jsonl, .json and .txt under it, hidden names and other extensions left out") {
    const Config config = load(dir.write("r.yaml", "data.train: " + data + "\n"), {}, weighted_schema());
    CHECK(paths_of(config) == folder_files);
    // The saved config lists the files: a resumed run reads these, whatever the folder holds by then.
    const Config again = load(dir.write("saved.yaml", config.to_yaml()), {}, weighted_schema());
    CHECK(paths_of(again) == folder_files);
  }
  SECTION("patterns in a list, a weight given to each file it matches, a literal name with brackets kept") {
    const Config config = load(dir.write("r.yaml", "data.train:\n  - {path: \"" + data + "/?.jsonl\", weight: 0.5}\n"
                                                   "  - \"" + dir.path().string() + "/*/e.jsonl\"\n"
                                                   "  - " + data + "/x[1].jsonl\n"),
                               {}, weighted_schema());
    const auto files = config.get_weighted_paths("data.train");
    REQUIRE(files.size() == 4);
    CHECK(files[0].path == data + "/a.jsonl");
    CHECK(files[0].weight == 0.5);
    CHECK(files[1].path == data + "/b.jsonl");
    CHECK(files[1].weight == 0.5);
    CHECK(files[2].path == (dir / "other/e.jsonl").string());
    CHECK(files[2].weight == 1.0);
    CHECK(files[3].path == data + "/x[1].jsonl");
  }
  SECTION("a folder whose name holds pattern characters is the folder") {
    const std::string bracketed = (dir / "runs[2024]").string();
    const Config config = load(dir.write("r.yaml", "data.train: '" + bracketed + "'\n"), {}, weighted_schema());
    CHECK(paths_of(config) == std::vector<std::string>{bracketed + "/f.jsonl"});
  }
  SECTION("a relative pattern is matched from where tune runs, not as part of that folder's own path") {
    const auto previous = std::filesystem::current_path();
    std::filesystem::current_path(dir / "runs[2024]");
    const auto files = [&] {
      try {
        return paths_of(load(dir.write("r.yaml", "data.train: '*.jsonl'\n"), {}, weighted_schema()));
      } catch (...) {
        std::filesystem::current_path(previous);
        throw;
      }
    }();
    std::filesystem::current_path(previous);
    CHECK(files == std::vector<std::string>{(dir / "runs[2024]/f.jsonl").string()});
  }
  SECTION("a pattern or folder that finds nothing, and **, are problems at their place") {
    const auto file = dir.write("r.yaml", "data:\n  train:\n    - '" + data + "/*.parquet'\n    - {path: " +
                                              (dir / "other/sub").string() + "}\n    - '" + data + "/**/*.jsonl'\n");
    std::filesystem::create_directories(dir / "other/sub");
    const auto problems = problems_loading(file);
    REQUIRE(problems.size() == 3);
    CHECK_THAT(problems[0], Catch::Contains(":3:7: data.train[0]: '" + data + "/*.parquet' matches no file"));
    CHECK_THAT(problems[1], Catch::Contains("data.train[1].path: the folder '") &&
                                Catch::Contains("holds no .jsonl, .json or .txt file"));
    CHECK_THAT(problems[2], Catch::Contains("data.train[2]: '") && Catch::Contains("** is not supported"));
  }
}
