// Run checkpoint bookkeeping: commit, list, newest, prune, crash leftovers, re-commit, and --resume lookup.
#include "tune/io/run_checkpoints.h"

#include <catch2/catch.hpp>

#include "scratch_dir.h"
#include "tune/core/error.h"

namespace fs = std::filesystem;
using namespace tune::io;
using tune::test::read_text;
using tune::test::ScratchDir;
using tune::test::write_text;

namespace {

// What a trainer does: begin, write its files, commit.
fs::path save(const fs::path& run, int64_t step, const std::string& content = "weights") {
  const fs::path temporary = begin_checkpoint(run, step);
  write_text(temporary / "model.safetensors", content);
  fs::create_directories(temporary / "optimizer");
  write_text(temporary / "optimizer" / "state.bin", content);
  return commit_checkpoint(temporary, step);
}

std::vector<std::string> names_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string usage_error_message(const fs::path& argument) {
  try {
    resolve_resume_target(argument);
  } catch (const tune::UsageError& error) {
    CHECK(error.exit_code() == 2);
    return error.what();
  }
  FAIL("expected tune::UsageError for " << argument);
  return {};
}

}  // namespace

TEST_CASE("begin_checkpoint gives a temporary dir; commit marks it COMPLETE and renames it", "[run][checkpoints]") {
  ScratchDir dir;
  const fs::path temporary = begin_checkpoint(dir.path(), 10);
  CHECK(temporary.parent_path() == checkpoints_dir(dir.path()));
  CHECK(temporary.filename().string() == fmt::format(".tmp-step-10-{}", ::getpid()));
  CHECK(fs::is_directory(temporary));
  CHECK(fs::is_empty(temporary));
  // Not listed while being written.
  write_text(temporary / "model.safetensors", "abc");
  CHECK(list_complete_checkpoints(dir.path()).empty());

  const fs::path committed = commit_checkpoint(temporary, 10);
  CHECK(committed == checkpoint_path(dir.path(), 10));
  CHECK(committed.filename() == "step-10");
  CHECK_FALSE(fs::exists(temporary));
  CHECK(fs::is_regular_file(committed / kCheckpointCompleteMarker));
  CHECK(read_text(committed / "model.safetensors") == "abc");
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{10});
}

TEST_CASE("list and newest ignore incomplete and foreign directories and sort numerically", "[run][checkpoints]") {
  ScratchDir dir;
  CHECK(list_complete_checkpoints(dir.path()).empty());  // no checkpoints/ yet
  CHECK_FALSE(newest_complete_checkpoint(dir.path()).has_value());
  save(dir.path(), 100);
  save(dir.path(), 20);
  save(dir.path(), 3);
  const fs::path checkpoints = checkpoints_dir(dir.path());
  fs::create_directories(checkpoints / "step-500");  // renamed by hand, or written by a tool without the marker
  write_text(checkpoints / "step-500" / "model.safetensors", "partial");
  fs::create_directories(checkpoints / "step-7x");
  write_text(checkpoints / "step-7x" / kCheckpointCompleteMarker, "");
  write_text(checkpoints / "step-9", "a file, not a directory");
  fs::create_directories(checkpoints / "notes");

  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{3, 20, 100});  // 100 after 20: not lexical
  REQUIRE(newest_complete_checkpoint(dir.path()).has_value());
  CHECK(*newest_complete_checkpoint(dir.path()) == checkpoints / "step-100");
}

TEST_CASE("prune_checkpoints keeps the newest N and removes stale temporaries", "[run][checkpoints]") {
  ScratchDir dir;
  for (int64_t step : {10, 20, 30, 40, 50}) save(dir.path(), step);
  const fs::path checkpoints = checkpoints_dir(dir.path());
  // Left by a run that crashed mid-save (another process id).
  fs::create_directories(checkpoints / ".tmp-step-60-999999999" / "sub");
  write_text(checkpoints / ".tmp-step-60-999999999" / "sub" / "model.safetensors", "half");
  // This process's own save in progress must survive.
  const fs::path in_progress = begin_checkpoint(dir.path(), 60);
  fs::create_directories(checkpoints / "step-5");  // incomplete: not counted, not deleted

  prune_checkpoints(dir.path(), 0);  // keeps all complete ones, still cleans up
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{10, 20, 30, 40, 50});
  CHECK_FALSE(fs::exists(checkpoints / ".tmp-step-60-999999999"));
  CHECK(fs::is_directory(in_progress));

  prune_checkpoints(dir.path(), 2);
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{40, 50});
  CHECK(names_in(checkpoints) ==
        std::vector<std::string>{in_progress.filename().string(), "step-40", "step-5", "step-50"});

  commit_checkpoint(in_progress, 60);
  prune_checkpoints(dir.path(), 1);
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{60});
}

TEST_CASE("Re-committing a step replaces it and leaves no aside copy", "[run][checkpoints]") {
  ScratchDir dir;
  save(dir.path(), 5, "old");
  const fs::path committed = save(dir.path(), 5, "new");
  CHECK(read_text(committed / "model.safetensors") == "new");
  CHECK(fs::is_regular_file(committed / kCheckpointCompleteMarker));
  CHECK(names_in(checkpoints_dir(dir.path())) == std::vector<std::string>{"step-5"});
}

TEST_CASE("A crash between the two renames of a re-commit is recovered", "[run][checkpoints]") {
  ScratchDir dir;
  save(dir.path(), 5, "only copy");
  const fs::path checkpoints = checkpoints_dir(dir.path());
  // Simulate: step-5 moved aside by a process that died before moving the new one in.
  fs::rename(checkpoints / "step-5", checkpoints / ".replaced-step-5-999999999");
  CHECK(list_complete_checkpoints(dir.path()).empty());
  prune_checkpoints(dir.path(), 3);
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{5});
  CHECK(read_text(checkpoints / "step-5" / "model.safetensors") == "only copy");

  // And when the new one did land, the aside copy is just removed.
  fs::create_directories(checkpoints / ".replaced-step-5-999999999");
  write_text(checkpoints / ".replaced-step-5-999999999" / kCheckpointCompleteMarker, "");
  recover_checkpoints(dir.path());
  CHECK(names_in(checkpoints) == std::vector<std::string>{"step-5"});
  CHECK(read_text(checkpoints / "step-5" / "model.safetensors") == "only copy");
}

TEST_CASE("commit_checkpoint fails clearly when the temporary dir is missing", "[run][checkpoints]") {
  ScratchDir dir;
  CHECK_THROWS_AS(commit_checkpoint(dir.path() / "checkpoints" / ".tmp-step-1-1", 1), tune::Error);
}

TEST_CASE("resolve_resume_target finds the newest checkpoint or the one named", "[run][checkpoints]") {
  ScratchDir dir;
  save(dir.path(), 10);
  save(dir.path(), 20);
  fs::create_directories(checkpoints_dir(dir.path()) / "step-30");  // incomplete, newer: must be skipped
  CHECK(resolve_resume_target(dir.path()) == checkpoints_dir(dir.path()) / "step-20");
  CHECK(resolve_resume_target(dir.path().string() + "/") == checkpoints_dir(dir.path()) / "step-20");
  CHECK(resolve_resume_target(checkpoints_dir(dir.path())) == checkpoints_dir(dir.path()) / "step-20");
  CHECK(resolve_resume_target(checkpoint_path(dir.path(), 10)) == checkpoint_path(dir.path(), 10));
}

TEST_CASE("resolve_resume_target errors name the directory", "[run][checkpoints]") {
  ScratchDir dir;
  const fs::path missing = dir.path() / "no-such-run";
  CHECK_THAT(usage_error_message(missing), Catch::Contains(missing.string()) && Catch::Contains("not a directory"));

  // A run that stopped before its first checkpoint.
  const fs::path empty_run = dir.path() / "empty-run";
  fs::create_directories(empty_run);
  CHECK_THAT(usage_error_message(empty_run),
             Catch::Contains("no complete checkpoint") && Catch::Contains((empty_run / "checkpoints").string()));

  // Only incomplete checkpoints.
  const fs::path crashed_run = dir.path() / "crashed-run";
  fs::create_directories(checkpoints_dir(crashed_run) / "step-10");
  fs::create_directories(checkpoints_dir(crashed_run) / ".tmp-step-20-999999999");
  CHECK_THAT(usage_error_message(crashed_run), Catch::Contains("no complete checkpoint"));

  // Naming the incomplete checkpoint itself.
  const fs::path incomplete = checkpoints_dir(crashed_run) / "step-10";
  CHECK_THAT(usage_error_message(incomplete),
             Catch::Contains(incomplete.string()) && Catch::Contains("incomplete") && Catch::Contains("COMPLETE"));
}
