// Preparing a run directory: takes the directory's lock for the rest of the process (one process owns a run;
// io/run_directory_lock.h), refuses to overwrite an earlier run's checkpoints unless resuming, writes the resolved
// config.yaml (config.yaml of the original run is kept on resume), and installs the Ctrl-C handler.
#pragma once

#include <atomic>
#include <filesystem>
#include <optional>

#include "tune/config/config.h"

namespace tune::recipes {

// Throws UsageError (exit 2) naming the directory and the holder's PID when another process holds its lock.
void prepare_run_directory(const std::filesystem::path& output_dir, const config::Config& config,
                           const std::optional<std::filesystem::path>& resume_from);

// First Ctrl-C (SIGINT) or SIGTERM sets the flag: the step loop saves a checkpoint and exits. A second Ctrl-C
// terminates at once (earlier checkpoints are intact: they are only ever replaced by rename).
void install_interrupt_handler();
bool interrupt_requested();

constexpr int kExitInterrupted = 130;  // shell convention for SIGINT

}  // namespace tune::recipes
