// Run directory preparation and interrupt handling shared by every recipe.
#include "tune/recipes/run_directory.h"

#include <csignal>
#include <fstream>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/run_checkpoints.h"
#include "tune/io/run_directory_lock.h"

namespace tune::recipes {
namespace {
std::atomic<bool> interrupted{false};

extern "C" void on_interrupt(int signal_number) {
  if (interrupted.exchange(true)) {
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
  }
}

// The run directory's lock lives as long as the process: a process trains one run, and the recipes' train()
// functions need not carry it through their step loops. The kernel releases it at exit, however the process ends.
std::optional<io::RunDirectoryLock>& held_lock() {
  static std::optional<io::RunDirectoryLock> lock;
  return lock;
}

void lock_run_directory(const std::filesystem::path& output_dir) {
  // Preparing the same directory again in one process keeps the lock it holds: locking the same file through a new
  // descriptor would conflict with itself (flock locks belong to open files, not to processes).
  if (held_lock() && held_lock()->guards(output_dir)) return;
  held_lock() = io::RunDirectoryLock::acquire(output_dir);
}

}  // namespace

void prepare_run_directory(const std::filesystem::path& output_dir, const config::Config& config,
                           const std::optional<std::filesystem::path>& resume_from) {
  // Before the guard below: two runs started together would both find no checkpoint yet and both go on.
  lock_run_directory(output_dir);
  if (!resume_from && !io::list_complete_checkpoints(output_dir).empty()) {
    throw UsageError(fmt::format(
        "{} already holds checkpoints of an earlier run; pass --resume to continue it, or --output-dir to start a "
        "new run elsewhere (nothing was changed)", output_dir.string()));
  }
  std::filesystem::create_directories(output_dir);
  const auto config_path = output_dir / "config.yaml";
  if (resume_from && std::filesystem::exists(config_path)) return;
  const auto temporary = output_dir / "config.yaml.tmp";
  {
    std::ofstream out(temporary);
    out << config.to_yaml();
    if (!out) throw Error(fmt::format("{}: cannot write the resolved config", temporary.string()));
  }
  std::filesystem::rename(temporary, config_path);
}

void install_interrupt_handler() {
  interrupted = false;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

bool interrupt_requested() { return interrupted.load(); }

}  // namespace tune::recipes
