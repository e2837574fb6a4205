// Run directory lock: flock(LOCK_EX | LOCK_NB) on RUN/.lock, with the holder's PID and host written into the file.
#include "tune/io/run_directory_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tune/core/error.h"

namespace tune::io {
namespace fs = std::filesystem;

namespace {

// run_directory_lock_holder probes with a shared lock held for an instant; trying again for a moment keeps such a
// probe (a `tune export` of the same run, say) from being taken for another run.
constexpr int kLockAttempts = 20;
constexpr auto kLockRetryDelay = std::chrono::milliseconds(5);

// "PID HOST" as the holder wrote it; pid 0 when the file is still empty (locked, PID not yet written).
struct Holder {
  long pid = 0;
  std::string host;
};

Holder read_holder(int fd) {
  char buffer[256] = {};
  const ssize_t size = ::pread(fd, buffer, sizeof buffer - 1, 0);
  Holder holder;
  if (size <= 0) return holder;
  char* end = nullptr;
  holder.pid = std::strtol(buffer, &end, 10);
  std::string rest(end, buffer + size);
  const auto first = rest.find_first_not_of(' ');
  const auto last = rest.find_first_of("\n ", first == std::string::npos ? rest.size() : first);
  if (first != std::string::npos) holder.host = rest.substr(first, last - first);
  return holder;
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// " (PID 123)", " (PID 123 on host b)" or "" when the holder has not written its PID yet.
std::string describe(const Holder& holder) {
  if (holder.pid <= 0) return "";
  if (holder.host.empty() || holder.host == this_host()) return fmt::format(" (PID {})", holder.pid);
  return fmt::format(" (PID {} on host {})", holder.pid, holder.host);
}

// Rewritten in place and then cut to length (not truncated first), so a reader never sees an empty file.
void write_holder(int fd) {
  const std::string text = fmt::format("{} {}\n", ::getpid(), this_host());
  if (::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size())) {
    (void)::ftruncate(fd, static_cast<off_t>(text.size()));
  }
  // The PID is only for messages: a write failure (a full disk) does not weaken the lock itself.
}

}  // namespace

RunDirectoryLock RunDirectoryLock::acquire(const fs::path& run_dir) {
  std::error_code error;
  fs::create_directories(run_dir, error);
  if (error) throw Error(fmt::format("cannot create run directory '{}': {}", run_dir.string(), error.message()));
  const fs::path path = run_dir / kRunLockFile;
  // O_CLOEXEC: a process this one starts (a local launcher's workers) must not inherit, and so keep, the lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(fmt::format("cannot open the run directory's lock file '{}': {}", path.string(), std::strerror(errno)));
  }
  for (int attempt = 1;; ++attempt) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    const int reason = errno;
    if (reason == EINTR) continue;
    if (reason == EWOULDBLOCK && attempt < kLockAttempts) {
      std::this_thread::sleep_for(kLockRetryDelay);
      continue;
    }
    const Holder holder = reason == EWOULDBLOCK ? read_holder(fd) : Holder{};
    ::close(fd);
    if (reason != EWOULDBLOCK) {
      throw Error(fmt::format("cannot lock '{}': {}", path.string(), std::strerror(reason)));
    }
    throw UsageError(fmt::format(
        "{} is in use: another tune process{} runs there and holds its lock ({}); two runs in one directory would overwrite each other's "
        "checkpoints. Wait for it to finish or stop it, or pass --output-dir to start a new run elsewhere (nothing "
        "was changed)",
        run_dir.string(), describe(holder), path.string()));
  }
  write_holder(fd);
  return RunDirectoryLock(fd);
}

RunDirectoryLock::RunDirectoryLock(RunDirectoryLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunDirectoryLock& RunDirectoryLock::operator=(RunDirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

// Closing the last descriptor of the open file releases the flock; the file stays (deleting it would let a second
// process lock a new file of the same name while a third still waits on the old one).
RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

bool RunDirectoryLock::guards(const fs::path& run_dir) const {
  struct stat held {};
  struct stat current {};
  if (fd_ < 0 || ::fstat(fd_, &held) != 0 || ::stat((run_dir / kRunLockFile).c_str(), &current) != 0) return false;
  return held.st_dev == current.st_dev && held.st_ino == current.st_ino;
}

std::optional<long> run_directory_lock_holder(const fs::path& run_dir) {
  const int fd = ::open((run_dir / kRunLockFile).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<long> holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
    ::flock(fd, LOCK_UN);
  } else if (errno == EWOULDBLOCK) {
    // This process's own lock conflicts too (flock locks belong to open files, not processes): the PID tells.
    const long pid = read_holder(fd).pid;
    if (pid != static_cast<long>(::getpid())) holder = pid;
  }
  ::close(fd);
  return holder;
}

}  // namespace tune::io
