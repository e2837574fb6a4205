// One process owns a run directory: an advisory lock (flock) on RUN/.lock, so that two `tune train` on the same
// --output-dir, or a --resume while the run still goes, cannot both write checkpoints and prune each other's
// files. The kernel drops the lock when its holder exits in any way (kill -9 included), so a crashed run never
// leaves a stale lock behind; the holder's PID is written into the file only for the message others get.
#pragma once

#include <filesystem>
#include <optional>

namespace tune::io {

inline constexpr const char* kRunLockFile = ".lock";

class RunDirectoryLock {
 public:
  // Creates `run_dir` if needed and locks run_dir/.lock. Throws tune::UsageError (exit 2) naming the directory and
  // the PID of the process that holds it, or tune::Error when the lock file cannot be created.
  static RunDirectoryLock acquire(const std::filesystem::path& run_dir);

  RunDirectoryLock(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock& operator=(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;
  ~RunDirectoryLock();

  // Whether this lock is the one on run_dir/.lock now (the same file, not one of an earlier, deleted directory).
  bool guards(const std::filesystem::path& run_dir) const;

 private:
  explicit RunDirectoryLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// The PID of another process that holds run_dir's lock (0 when it has not written its PID yet); nullopt when the
// lock is free, held by this process, or run_dir has no lock file. Creates nothing.
std::optional<long> run_directory_lock_holder(const std::filesystem::path& run_dir);

}  // namespace tune::io
