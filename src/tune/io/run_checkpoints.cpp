// Run checkpoints: temporary directory, COMPLETE marker, fsync, rename; listing, pruning and --resume lookup.
#include "tune/io/run_checkpoints.h"

#include "tune/core/error.h"
#include "tune/io/run_directory_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

namespace tune::io {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTemporaryPrefix = ".tmp-";
constexpr const char* kReplacedPrefix = ".replaced-step-";
constexpr const char* kPruningPrefix = ".pruning-step-";

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// Parses the digits of `text` from `position` to `end`; nullopt unless all are digits and there is at least one.
std::optional<int64_t> parse_number(const std::string& text, size_t position, size_t end) {
  if (position >= end || end - position > 18) return std::nullopt;
  int64_t value = 0;
  for (size_t i = position; i < end; ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

// "step-N" -> N; anything else (step-, step-1a, step-1.bak) -> nullopt.
std::optional<int64_t> parse_step_name(const std::string& name) {
  if (!starts_with(name, "step-")) return std::nullopt;
  return parse_number(name, 5, name.size());
}

// ".replaced-step-N-PID" -> N.
std::optional<int64_t> parse_replaced_name(const std::string& name) {
  if (!starts_with(name, kReplacedPrefix)) return std::nullopt;
  const size_t begin = std::char_traits<char>::length(kReplacedPrefix);
  const size_t dash = name.find('-', begin);
  if (dash == std::string::npos || !parse_number(name, dash + 1, name.size())) return std::nullopt;
  return parse_number(name, begin, dash);
}

// Whether a .tmp-* or .replaced-* name ends in this process's id, i.e. it is ours and possibly in use.
bool belongs_to_this_process(const std::string& name) {
  const std::string suffix = fmt::format("-{}", ::getpid());
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_complete(const fs::path& directory) {
  std::error_code error;
  return fs::is_directory(directory, error) && fs::is_regular_file(directory / kCheckpointCompleteMarker, error);
}

// Best effort: some filesystems refuse fsync on directories (EINVAL); durability there is the filesystem's call.
void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void fsync_tree(const fs::path& root) {
  std::error_code error;
  for (fs::recursive_directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error)) fsync_path(it->path(), false);
    else if (it->is_directory(error)) fsync_path(it->path(), true);
  }
  fsync_path(root, true);
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error) {
    throw Error(fmt::format("cannot rename checkpoint '{}' to '{}': {}", from.string(), to.string(), error.message()));
  }
}

void remove_all_or_throw(const fs::path& path) {
  std::error_code error;
  fs::remove_all(path, error);
  if (error) throw Error(fmt::format("cannot remove '{}': {}", path.string(), error.message()));
}

std::vector<fs::directory_entry> entries(const fs::path& directory) {
  std::vector<fs::directory_entry> found;
  std::error_code error;
  if (!fs::is_directory(directory, error)) return found;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    found.push_back(*it);
  }
  return found;
}

}  // namespace

fs::path checkpoints_dir(const fs::path& output_dir) { return output_dir / "checkpoints"; }

fs::path checkpoint_path(const fs::path& output_dir, int64_t step) {
  return checkpoints_dir(output_dir) / fmt::format("step-{}", step);
}

fs::path begin_checkpoint(const fs::path& output_dir, int64_t step) {
  if (step < 0) throw std::invalid_argument(fmt::format("begin_checkpoint: step must be >= 0, got {}", step));
  const fs::path temporary = checkpoints_dir(output_dir) / fmt::format("{}step-{}-{}", kTemporaryPrefix, step, ::getpid());
  remove_all_or_throw(temporary);
  std::error_code error;
  fs::create_directories(temporary, error);
  if (error) throw Error(fmt::format("cannot create checkpoint directory '{}': {}", temporary.string(), error.message()));
  return temporary;
}

fs::path commit_checkpoint(const fs::path& temporary_dir, int64_t step) {
  std::error_code error;
  if (!fs::is_directory(temporary_dir, error)) {
    throw Error(fmt::format("cannot commit checkpoint: '{}' is not a directory", temporary_dir.string()));
  }
  const fs::path parent = temporary_dir.parent_path();
  const fs::path final_path = parent / fmt::format("step-{}", step);
  {
    std::ofstream marker(temporary_dir / kCheckpointCompleteMarker, std::ios::trunc);
    marker << fmt::format("step {}\n", step);
    marker.flush();
    if (!marker) {
      throw Error(fmt::format("cannot write '{}': {}", (temporary_dir / kCheckpointCompleteMarker).string(),
                              std::strerror(errno)));
    }
  }
  // Contents reach the disk before the rename does, so a power loss cannot expose a complete-looking empty dir.
  fsync_tree(temporary_dir);

  fs::path replaced;
  if (fs::exists(final_path, error)) {
    replaced = parent / fmt::format("{}{}-{}", kReplacedPrefix, step, ::getpid());
    remove_all_or_throw(replaced);
    rename_or_throw(final_path, replaced);
  }
  rename_or_throw(temporary_dir, final_path);
  fsync_path(parent, true);
  if (!replaced.empty()) remove_all_or_throw(replaced);
  return final_path;
}

std::vector<int64_t> list_complete_checkpoints(const fs::path& output_dir) {
  std::vector<int64_t> steps;
  for (const fs::directory_entry& entry : entries(checkpoints_dir(output_dir))) {
    const auto step = parse_step_name(entry.path().filename().string());
    if (step && is_complete(entry.path())) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<fs::path> newest_complete_checkpoint(const fs::path& output_dir) {
  const std::vector<int64_t> steps = list_complete_checkpoints(output_dir);
  if (steps.empty()) return std::nullopt;
  return checkpoint_path(output_dir, steps.back());
}

void recover_checkpoints(const fs::path& output_dir) {
  // A live run's .replaced-* may be mid-commit; only the process that owns the directory repairs it.
  if (run_directory_lock_holder(output_dir)) return;
  for (const fs::directory_entry& entry : entries(checkpoints_dir(output_dir))) {
    const std::string name = entry.path().filename().string();
    const auto step = parse_replaced_name(name);
    if (!step || belongs_to_this_process(name)) continue;
    const fs::path original = checkpoint_path(output_dir, *step);
    if (is_complete(original)) {
      remove_all_or_throw(entry.path());
    } else if (is_complete(entry.path())) {
      // The crash came between moving the old copy aside and moving the new one in: the old one is the only copy.
      remove_all_or_throw(original);
      rename_or_throw(entry.path(), original);
    }
  }
}

void prune_checkpoints(const fs::path& output_dir, int keep_last) {
  // Another process's run: its temporary directories are in progress, not leftovers.
  if (run_directory_lock_holder(output_dir)) return;
  recover_checkpoints(output_dir);
  // Leftovers of crashed runs: checkpoints being written or deleted, and step-N directories without COMPLETE (after
  // recovery, no commit can still need them: an in-progress checkpoint is never named step-N before it is complete).
  std::error_code error;
  for (const fs::directory_entry& entry : entries(checkpoints_dir(output_dir))) {
    const std::string name = entry.path().filename().string();
    const bool leftover = (starts_with(name, kTemporaryPrefix) && !belongs_to_this_process(name)) ||
                          starts_with(name, kPruningPrefix) ||
                          (parse_step_name(name) && entry.is_directory(error) && !is_complete(entry.path()));
    if (leftover) remove_all_or_throw(entry.path());
  }
  if (keep_last <= 0) return;
  const std::vector<int64_t> steps = list_complete_checkpoints(output_dir);
  const size_t keep = static_cast<size_t>(keep_last);
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    // Deleting file by file in place would leave, if killed midway, a step-N that says COMPLETE but lacks files.
    // One rename takes it out of every reader's sight first; what remains of a crash here is removed above.
    const fs::path doomed = checkpoints_dir(output_dir) / fmt::format("{}{}-{}", kPruningPrefix, steps[i], ::getpid());
    remove_all_or_throw(doomed);
    rename_or_throw(checkpoint_path(output_dir, steps[i]), doomed);
    remove_all_or_throw(doomed);
  }
}

fs::path resolve_resume_target(const fs::path& run_or_checkpoint) {
  std::error_code error;
  // "run/" has an empty filename(); drop the trailing separator so the name checks below see "run".
  fs::path target = run_or_checkpoint.lexically_normal();
  if (!target.has_filename() && target.has_parent_path()) target = target.parent_path();
  if (!fs::is_directory(target, error)) {
    throw UsageError(fmt::format(
        "--resume: '{}' is not a directory; give a run directory (the output_dir of an earlier run) or one of its "
        "checkpoints/step-N directories",
        target.string()));
  }
  const std::string name = target.filename().string();
  if (starts_with(name, kPruningPrefix) || starts_with(name, kReplacedPrefix)) {
    throw UsageError(fmt::format(
        "--resume: '{}' is an old checkpoint being deleted or replaced, not one to resume from. HINT: resume from "
        "the run directory '{}' to use its newest complete checkpoint",
        target.string(), fs::absolute(target).parent_path().parent_path().string()));
  }
  if (is_complete(target)) return target;
  if (parse_step_name(name) || starts_with(name, kTemporaryPrefix)) {
    throw UsageError(fmt::format(
        "--resume: checkpoint '{}' is incomplete (no {} marker): it was interrupted while being written. "
        "HINT: resume from the run directory '{}' to use its newest complete checkpoint",
        target.string(), kCheckpointCompleteMarker, fs::absolute(target).parent_path().parent_path().string()));
  }
  fs::path run_dir = target;
  if (name == "checkpoints" && !fs::exists(checkpoints_dir(target), error)) run_dir = target.parent_path();
  recover_checkpoints(run_dir);
  if (auto newest = newest_complete_checkpoint(run_dir)) return *newest;
  throw UsageError(fmt::format(
      "--resume: no complete checkpoint in '{}' (looked for step-N directories containing {}); "
      "the run may have stopped before its first checkpoint was saved",
      checkpoints_dir(run_dir).string(), kCheckpointCompleteMarker));
}

}  // namespace tune::io
