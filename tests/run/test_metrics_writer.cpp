// metrics.jsonl: every line is a JSON object, appends survive reopening, resume trims later steps.
#include "tune/core/metrics_writer.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "scratch_dir.h"
#include "tune/core/error.h"

using tune::MetricsWriter;
using tune::read_metrics;
using tune::test::read_text;
using tune::test::ScratchDir;
using tune::test::write_text;
using nlohmann::json;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<int64_t> steps_of(const std::vector<json>& records) {
  std::vector<int64_t> steps;
  for (const json& record : records) steps.push_back(record.at("step").get<int64_t>());
  return steps;
}

}  // namespace

TEST_CASE("MetricsWriter writes one valid JSON object per line with the given fields", "[run][metrics]") {
  ScratchDir dir;
  MetricsWriter writer(dir.path() / "out");  // creates the output directory
  writer.write({{"step", 1}, {"loss", 2.5}, {"lr", 1e-4}, {"grad_norm", 0.75}, {"tokens_per_s", 5100.0},
                {"peak_mem_bytes", int64_t{123456789}}, {"elapsed_s", 1.25}});
  writer.write({{"step", 2}, {"loss", std::numeric_limits<double>::quiet_NaN()}, {"eval_loss", 2.25}});

  REQUIRE(writer.path() == dir.path() / "out" / "metrics.jsonl");
  // Read before the writer is destroyed: each line must already be on disk (flushed per line).
  const auto lines = lines_of(read_text(writer.path()));
  REQUIRE(lines.size() == 2);
  for (const auto& line : lines) {
    const json record = json::parse(line);  // throws if a line is not valid JSON
    REQUIRE(record.is_object());
  }
  const json first = json::parse(lines[0]);
  CHECK(first["step"] == 1);
  CHECK(first["loss"].get<double>() == 2.5);
  CHECK(first["peak_mem_bytes"].get<int64_t>() == 123456789);
  CHECK(first["tokens_per_s"].get<double>() == 5100.0);
  const json second = json::parse(lines[1]);
  CHECK(second["loss"].is_null());  // NaN has no JSON spelling
  CHECK(second["eval_loss"].get<double>() == 2.25);

  const auto records = read_metrics(writer.path());
  CHECK(steps_of(records) == std::vector<int64_t>{1, 2});
}

TEST_CASE("MetricsWriter rejects records without an integer step", "[run][metrics]") {
  ScratchDir dir;
  MetricsWriter writer(dir.path());
  CHECK_THROWS_AS(writer.write({{"loss", 1.0}}), std::invalid_argument);
  CHECK_THROWS_AS(writer.write({{"step", "3"}}), std::invalid_argument);
  CHECK_THROWS_AS(writer.write(json::array({1, 2})), std::invalid_argument);
  CHECK(read_metrics(writer.path()).empty());
}

TEST_CASE("MetricsWriter appends to an existing file instead of overwriting it", "[run][metrics]") {
  ScratchDir dir;
  {
    MetricsWriter writer(dir.path());
    writer.write({{"step", 1}, {"loss", 3.0}});
    writer.write({{"step", 2}, {"loss", 2.0}});
  }
  MetricsWriter reopened(dir.path());
  reopened.write({{"step", 3}, {"loss", 1.0}});
  CHECK(steps_of(read_metrics(reopened.path())) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("MetricsWriter::truncate_after drops steps past the resumed step", "[run][metrics]") {
  ScratchDir dir;
  {
    MetricsWriter writer(dir.path());
    for (int step = 1; step <= 6; ++step) writer.write({{"step", step}, {"loss", 1.0 / step}});
  }
  // The run crashed after step 6 but its newest checkpoint is step 4: steps 5 and 6 will be redone.
  MetricsWriter resumed(dir.path());
  resumed.truncate_after(4);
  CHECK(steps_of(read_metrics(resumed.path())) == std::vector<int64_t>{1, 2, 3, 4});
  resumed.write({{"step", 5}, {"loss", 0.2}});
  resumed.write({{"step", 6}, {"loss", 0.1}});
  const auto records = read_metrics(resumed.path());
  CHECK(steps_of(records) == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(records.back()["loss"].get<double>() == 0.1);
  CHECK_FALSE(std::filesystem::exists(resumed.path().string() + fmt::format(".tmp-{}", ::getpid())));
}

TEST_CASE("A line torn by a crash is skipped on read and cut off when the writer reopens", "[run][metrics]") {
  ScratchDir dir;
  write_text(dir.path() / "metrics.jsonl", "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"lo");
  CHECK(steps_of(read_metrics(dir.path() / "metrics.jsonl")) == std::vector<int64_t>{1});

  MetricsWriter writer(dir.path());
  writer.write({{"step", 2}, {"loss", 1.5}});
  const auto lines = lines_of(read_text(writer.path()));
  REQUIRE(lines.size() == 2);
  for (const auto& line : lines) CHECK_NOTHROW(json::parse(line));
  CHECK(steps_of(read_metrics(writer.path())) == std::vector<int64_t>{1, 2});
}

TEST_CASE("read_metrics: missing file is empty, a corrupt inner line is an error naming the line", "[run][metrics]") {
  ScratchDir dir;
  CHECK(read_metrics(dir.path() / "absent.jsonl").empty());
  write_text(dir.path() / "bad.jsonl", "{\"step\": 1}\nnot json\n{\"step\": 3}\n");
  try {
    read_metrics(dir.path() / "bad.jsonl");
    FAIL("expected tune::InputError");
  } catch (const tune::InputError& error) {
    CHECK_THAT(error.what(), Catch::Contains("bad.jsonl:2"));
  }
}
