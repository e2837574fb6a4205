// Run checkpoint bookkeeping: commit, list, newest, prune, crash leftovers, re-commit, and --resume lookup.
#include "tune/io/run_checkpoints.h"

#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

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
  fs::create_directories(checkpoints / "step-5");  // incomplete: not counted, removed as a crash leftover

  prune_checkpoints(dir.path(), 0);  // keeps all complete ones, still cleans up
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{10, 20, 30, 40, 50});
  CHECK_FALSE(fs::exists(checkpoints / ".tmp-step-60-999999999"));
  CHECK(fs::is_directory(in_progress));

  prune_checkpoints(dir.path(), 2);
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{40, 50});
  CHECK(names_in(checkpoints) == std::vector<std::string>{in_progress.filename().string(), "step-40", "step-50"});

  commit_checkpoint(in_progress, 60);
  prune_checkpoints(dir.path(), 1);
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{60});
}

TEST_CASE("prune_checkpoints removes what a crashed prune or save left", "[run][checkpoints]") {
  ScratchDir dir;
  for (int64_t step : {10, 20, 40}) save(dir.path(), step);
  const fs::path checkpoints = checkpoints_dir(dir.path());
  // A prune killed midway: step-10 was renamed out of sight and partly deleted, COMPLETE still in it.
  fs::rename(checkpoints / "step-10", checkpoints / ".pruning-step-10-999999999");
  fs::remove(checkpoints / ".pruning-step-10-999999999" / "model.safetensors");
  // A checkpoint that lost its marker (an older tune's file-by-file prune, killed): never a checkpoint again.
  fs::remove(checkpoints / "step-20" / kCheckpointCompleteMarker);
  CHECK(list_complete_checkpoints(dir.path()) == std::vector<int64_t>{40});
  const fs::path pruning = checkpoints / ".pruning-step-10-999999999";
  CHECK_THAT(usage_error_message(pruning), Catch::Contains(pruning.string()) && Catch::Contains("being deleted"));

  prune_checkpoints(dir.path(), 0);
  CHECK(names_in(checkpoints) == std::vector<std::string>{"step-40"});
  CHECK(read_text(checkpoints / "step-40" / "optimizer" / "state.bin") == "weights");
}

// Every step-N directory holds all its files: a checkpoint is whole or out of sight, never half deleted (whether
// or not its COMPLETE went first: the order a directory is deleted in is the filesystem's).
void check_step_directories_are_whole(const fs::path& run, size_t files_per_checkpoint) {
  for (const auto& checkpoint : fs::directory_iterator(checkpoints_dir(run))) {
    if (checkpoint.path().filename().string().rfind("step-", 0) != 0) continue;
    size_t files = 0;
    for (const auto& entry : fs::recursive_directory_iterator(checkpoint.path())) files += entry.is_regular_file();
    INFO(checkpoint.path());
    CHECK(files == files_per_checkpoint);
  }
}

TEST_CASE("A prune killed midway leaves no checkpoint with missing files", "[run][checkpoints]") {
  ScratchDir dir;
  const fs::path run = dir.path();
  // Enough files that deleting them takes a while: the kill lands in the middle of it.
  constexpr int kExtraFiles = 4000;
  for (int64_t step : {10, 20}) {
    const fs::path temporary = begin_checkpoint(run, step);
    write_text(temporary / "model.safetensors", "weights");
    fs::create_directories(temporary / "shards");
    for (int i = 0; i < kExtraFiles; ++i) write_text(temporary / "shards" / fmt::format("{}.bin", i), "x");
    commit_checkpoint(temporary, step);
  }
  const size_t files_per_checkpoint = kExtraFiles + 2;  // + model.safetensors and COMPLETE
  const fs::path doomed = checkpoint_path(run, 10);
  const auto count_files = [](const fs::path& directory) {
    std::error_code error;
    size_t count = 0;
    for (fs::recursive_directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) ++count;
    return count;
  };
  const size_t entries_before = count_files(doomed);

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      prune_checkpoints(run, 1);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  // Kill as soon as the deletion has visibly started: step-10 is gone from its place or has lost entries.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (fs::exists(doomed) && count_files(doomed) == entries_before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);

  check_step_directories_are_whole(run, files_per_checkpoint);
  CHECK(list_complete_checkpoints(run).back() == 20);
  prune_checkpoints(run, 1);  // the next run's prune finishes the job
  CHECK(names_in(checkpoints_dir(run)) == std::vector<std::string>{"step-20"});
  check_step_directories_are_whole(run, files_per_checkpoint);
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
