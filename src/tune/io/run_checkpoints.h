// Bookkeeping for a run's checkpoints (output_dir/checkpoints/step-N): write into a temporary directory, mark it
// COMPLETE and rename it into place, so an interruption at any moment leaves every earlier checkpoint intact and
// never passes a half-written one off as complete (ARCHITECTURE.md §4). What goes inside a checkpoint is the
// caller's business.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

namespace tune::io {

// The marker file commit_checkpoint writes last; a step-N directory without it is ignored.
inline constexpr const char* kCheckpointCompleteMarker = "COMPLETE";

// output_dir/checkpoints
std::filesystem::path checkpoints_dir(const std::filesystem::path& output_dir);
// output_dir/checkpoints/step-N
std::filesystem::path checkpoint_path(const std::filesystem::path& output_dir, int64_t step);

// Creates and returns an empty output_dir/checkpoints/.tmp-step-N-<pid> to write the checkpoint into (a leftover
// one from an earlier failed attempt by this process is emptied). Throws tune::Error on I/O failure.
std::filesystem::path begin_checkpoint(const std::filesystem::path& output_dir, int64_t step);

// Writes COMPLETE into `temporary_dir`, fsyncs its files and the directory, and renames it to
// checkpoints/step-N next to it; returns that path. An existing step-N is first renamed aside to
// .replaced-step-N-<pid> and removed only after the new one is in place, so a crash in between still leaves a
// copy (recover_checkpoints puts it back). Throws tune::Error on I/O failure.
std::filesystem::path commit_checkpoint(const std::filesystem::path& temporary_dir, int64_t step);

// Steps of the step-N directories under output_dir/checkpoints that contain COMPLETE, ascending. A missing
// checkpoints directory gives an empty list.
std::vector<int64_t> list_complete_checkpoints(const std::filesystem::path& output_dir);

// output_dir/checkpoints/step-N for the largest complete N, if any.
std::optional<std::filesystem::path> newest_complete_checkpoint(const std::filesystem::path& output_dir);

// Undoes a commit that crashed between its two renames: a complete .replaced-step-N-* whose step-N is missing is
// renamed back to step-N; one whose step-N is complete is removed. Does nothing while another process holds the
// run directory's lock (io/run_directory_lock.h): that run may be in the middle of a commit.
void recover_checkpoints(const std::filesystem::path& output_dir);

// Runs recover_checkpoints, deletes the oldest complete checkpoints beyond the newest `keep_last` (keep_last <= 0
// keeps all), and removes what crashed runs left: .tmp-* directories (those of this process are in progress and
// kept), .pruning-* directories and step-N directories without COMPLETE. A checkpoint is deleted by first renaming
// it to .pruning-step-N-<pid>, so a kill midway never leaves a step-N that says COMPLETE but lacks files. Call it
// only from the process that writes the checkpoints; it does nothing while another process holds the lock.
void prune_checkpoints(const std::filesystem::path& output_dir, int keep_last);

// The checkpoint directory `--resume ARG` names: ARG itself when it is a complete checkpoint, else the newest
// complete checkpoint of the run directory ARG (or of ARG/.. when ARG is a run's checkpoints/ directory).
// Throws tune::UsageError naming the directory when ARG does not exist, is an incomplete checkpoint or one being
// deleted (.pruning-*) or replaced (.replaced-*), or holds no complete checkpoint.
std::filesystem::path resolve_resume_target(const std::filesystem::path& run_or_checkpoint);

}  // namespace tune::io
