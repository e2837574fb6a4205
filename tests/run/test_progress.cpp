// Progress display: number formatters, the bar and log line layouts, and log-every-N when not on a terminal.
#include "tune/core/progress.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <limits>

#include "scratch_dir.h"

using tune::format_bytes;
using tune::format_count;
using tune::format_duration;
using tune::ProgressSnapshot;

TEST_CASE("format_duration", "[run][progress]") {
  CHECK(format_duration(0) == "0s");
  CHECK(format_duration(45.4) == "45s");
  CHECK(format_duration(59.6) == "1m00s");
  CHECK(format_duration(192) == "3m12s");
  CHECK(format_duration(3725) == "1h02m");
  CHECK(format_duration(2 * 86400 + 3 * 3600 + 59) == "2d03h");
  CHECK(format_duration(-1) == "?");
  CHECK(format_duration(std::numeric_limits<double>::quiet_NaN()) == "?");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "?");
}

TEST_CASE("format_count", "[run][progress]") {
  CHECK(format_count(0) == "0");
  CHECK(format_count(0.5) == "0.5");
  CHECK(format_count(12.34) == "12.3");
  CHECK(format_count(950) == "950");
  CHECK(format_count(1234) == "1.2k");
  CHECK(format_count(5100) == "5.1k");
  CHECK(format_count(999960) == "1.0M");  // not "1000.0k"
  CHECK(format_count(3.4e6) == "3.4M");
  CHECK(format_count(5.6e9) == "5.6G");
  CHECK(format_count(7.8e12) == "7.8T");
}

TEST_CASE("format_bytes", "[run][progress]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(12.3 * 1024 * 1024) == "12.3 MiB");
  CHECK(format_bytes(1024.0 * 1024 * 1024) == "1.0 GiB");
  CHECK(format_bytes(1024.0 * 1024 * 1024 - 1) == "1.0 GiB");  // not "1024.0 MiB"
}

TEST_CASE("Progress bar line layout", "[run][progress]") {
  ProgressSnapshot snapshot;
  snapshot.step = 120;
  snapshot.total_steps = 2000;
  snapshot.loss = 1.2341;
  snapshot.throughput = 5100;
  snapshot.eta_seconds = 192;
  CHECK(tune::format_progress_bar_line(snapshot, 10) == "step 120/2000 [>         ] loss 1.234 | 5.1k tok/s | ETA 3m12s");
  snapshot.step = 1000;
  CHECK(tune::format_progress_bar_line(snapshot, 10) == "step 1000/2000 [====>     ] loss 1.234 | 5.1k tok/s | ETA 3m12s");
  snapshot.step = 2000;
  snapshot.eta_seconds = 0;
  CHECK(tune::format_progress_bar_line(snapshot, 10) == "step 2000/2000 [==========] loss 1.234 | 5.1k tok/s | ETA 0s");

  // Unknown total: no bar, no ETA; NaN loss is shown, a missing throughput is left out.
  ProgressSnapshot open_ended;
  open_ended.step = 7;
  open_ended.loss = std::numeric_limits<double>::quiet_NaN();
  open_ended.throughput = 0;
  CHECK(tune::format_progress_bar_line(open_ended) == "step 7 loss nan");
}

TEST_CASE("Progress log line layout", "[run][progress]") {
  ProgressSnapshot snapshot;
  snapshot.step = 120;
  snapshot.total_steps = 2000;
  snapshot.loss = 1.234;
  snapshot.throughput = 3.5;
  snapshot.throughput_unit = "samples/s";
  snapshot.elapsed_seconds = 62;
  snapshot.eta_seconds = 192;
  CHECK(tune::format_progress_log_line(snapshot) ==
        "step 120/2000 (6.0%) | loss 1.234 | 3.5 samples/s | elapsed 1m02s | ETA 3m12s");
}

TEST_CASE("Progress writes plain lines every N steps when not on a terminal", "[run][progress]") {
  tune::test::ScratchDir dir;
  const auto log_path = dir.path() / "progress.log";
  std::FILE* stream = std::fopen(log_path.c_str(), "w");
  REQUIRE(stream != nullptr);
  {
    tune::ProgressOptions options;
    options.total_steps = 25;
    options.log_every = 10;
    tune::Progress progress(options, stream);  // a regular file is not a terminal
    CHECK_FALSE(progress.interactive());
    for (int step = 1; step <= 25; ++step) progress.update(step, 1.0 / step, 1000.0);
    progress.print("checkpoint saved");
  }
  std::fclose(stream);
  const std::string text = tune::test::read_text(log_path);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find('\033') == std::string::npos);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 4);  // steps 10, 20, the last step 25, then the printed line
  CHECK_THAT(lines[0], Catch::StartsWith("step 10/25 (40.0%) | loss 0.1 | 1.0k tok/s | elapsed "));
  CHECK_THAT(lines[1], Catch::StartsWith("step 20/25 (80.0%)"));
  CHECK_THAT(lines[2], Catch::StartsWith("step 25/25 (100.0%)") && Catch::EndsWith("ETA 0s"));
  CHECK(lines[3] == "checkpoint saved");
}

TEST_CASE("Progress redraws one line in interactive mode", "[run][progress]") {
  tune::test::ScratchDir dir;
  const auto log_path = dir.path() / "progress.tty";
  std::FILE* stream = std::fopen(log_path.c_str(), "w");
  REQUIRE(stream != nullptr);
  {
    tune::ProgressOptions options;
    options.total_steps = 3;
    options.interactive = true;
    tune::Progress progress(options, stream);
    progress.update(1, 2.0, 100.0);
    progress.print("eval loss 1.9");
    progress.update(3, 1.0, 100.0);  // the last step is always drawn, however soon after the previous one
  }  // the destructor ends the open line
  std::fclose(stream);
  const std::string text = tune::test::read_text(log_path);
  CHECK_THAT(text, Catch::StartsWith("\rstep 1/3 ["));
  CHECK_THAT(text, Catch::Contains("\r\033[Keval loss 1.9\n\rstep 1/3 ["));
  CHECK_THAT(text, Catch::Contains("\rstep 3/3 [") && Catch::EndsWith("ETA 0s\033[K\n"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);  // the printed line and the final newline
}
