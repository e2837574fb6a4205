// The run directory lock: one holder at a time, the holder's PID in the refusal, released when the holder dies
// (kill -9 included), and seen by recover/prune, which leave a live run's directory alone.
#include "tune/io/run_directory_lock.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "scratch_dir.h"
#include "tune/core/error.h"
#include "tune/io/run_checkpoints.h"

namespace fs = std::filesystem;
using namespace tune::io;
using tune::test::ScratchDir;
using tune::test::write_text;

namespace {

std::string refusal(const fs::path& run_dir) {
  try {
    RunDirectoryLock::acquire(run_dir);
  } catch (const tune::UsageError& error) {
    CHECK(error.exit_code() == 2);
    return error.what();
  }
  FAIL("expected tune::UsageError for " << run_dir);
  return {};
}

// Another process that locks run_dir/.lock as tune does and then waits to be killed. Only system calls in the child
// (the test process may have threads), and _exit: the parent's objects are not the child's to destroy.
pid_t start_holder(const fs::path& run_dir) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const std::string lock_path = (run_dir / kRunLockFile).string();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) ::_exit(1);
    char text[32];
    const int length = std::snprintf(text, sizeof text, "%ld\n", static_cast<long>(::getpid()));
    if (::pwrite(fd, text, length, 0) != length || ::ftruncate(fd, length) != 0) ::_exit(1);
    if (::write(ready[1], "x", 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char byte = 0;
  const bool locked = ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  if (!locked) {
    ::waitpid(child, nullptr, 0);
    FAIL("the helper process could not lock " << lock_path);
  }
  return child;
}

void kill_hard(pid_t child) {
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

}  // namespace

TEST_CASE("A run directory lock is taken once, names its holder, and is released when it goes", "[run][lock]") {
  ScratchDir dir;
  const fs::path run = dir.path() / "run";
  {
    RunDirectoryLock lock = RunDirectoryLock::acquire(run);  // creates the directory
    CHECK(fs::is_regular_file(run / kRunLockFile));
    CHECK(lock.guards(run));
    CHECK_FALSE(run_directory_lock_holder(run).has_value());  // held by this process: not "another"
    // A second lock on the same file conflicts even within one process (flock belongs to the open file).
    CHECK_THAT(refusal(run), Catch::Contains(run.string()) && Catch::Contains(fmt::format("PID {}", ::getpid())) &&
                                 Catch::Contains("--output-dir"));
    RunDirectoryLock moved = std::move(lock);
    CHECK(moved.guards(run));
  }
  RunDirectoryLock again = RunDirectoryLock::acquire(run);  // released by the destructor
  CHECK(again.guards(run));
  CHECK_FALSE(again.guards(dir.path() / "elsewhere"));
}

TEST_CASE("Another process's lock is refused with its PID and released by kill -9", "[run][lock]") {
  ScratchDir dir;
  const fs::path run = dir.path() / "run";
  fs::create_directories(run);
  CHECK_FALSE(run_directory_lock_holder(run).has_value());  // no lock file yet
  const pid_t holder = start_holder(run);
  REQUIRE(run_directory_lock_holder(run) == std::optional<long>(holder));
  CHECK_THAT(refusal(run), Catch::Contains(run.string()) && Catch::Contains(fmt::format("PID {}", holder)));
  kill_hard(holder);  // no cleanup runs: the kernel drops the lock
  CHECK_FALSE(run_directory_lock_holder(run).has_value());
  RunDirectoryLock lock = RunDirectoryLock::acquire(run);
  CHECK(lock.guards(run));
}

TEST_CASE("recover and prune leave a directory another process holds alone", "[run][lock][checkpoints]") {
  ScratchDir dir;
  const fs::path run = dir.path() / "run";
  const fs::path checkpoints = checkpoints_dir(run);
  // What a live run may have in flight: a checkpoint being written, an old copy moved aside mid-commit.
  fs::create_directories(checkpoints / ".tmp-step-20-999999999");
  fs::create_directories(checkpoints / ".replaced-step-10-999999999");
  write_text(checkpoints / ".replaced-step-10-999999999" / kCheckpointCompleteMarker, "");
  const pid_t holder = start_holder(run);
  recover_checkpoints(run);
  prune_checkpoints(run, 1);
  CHECK(fs::is_directory(checkpoints / ".tmp-step-20-999999999"));
  CHECK(fs::is_directory(checkpoints / ".replaced-step-10-999999999"));
  CHECK_FALSE(fs::exists(checkpoints / "step-10"));
  kill_hard(holder);
  prune_checkpoints(run, 1);  // now nobody runs there: the leftovers are repaired and cleaned
  CHECK_FALSE(fs::exists(checkpoints / ".tmp-step-20-999999999"));
  CHECK(list_complete_checkpoints(run) == std::vector<int64_t>{10});
}
