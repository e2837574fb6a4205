// Logging implementation: one mutex so lines from threads never interleave.
#include "tune/core/log.h"

#include <cstdio>
#include <mutex>

namespace tune::log {
namespace {
Level current_level = Level::info;
int current_rank = 0;
std::mutex output_mutex;
}  // namespace

void set_level(Level level) { current_level = level; }
bool enabled(Level level) { return level >= current_level && (level != Level::info || current_rank == 0); }
void set_rank(int rank) { current_rank = rank; }
int rank() { return current_rank; }

void write(Level level, const std::string& message) {
  if (level < current_level) return;
  if (level == Level::info && current_rank != 0) return;
  const char* prefix = level == Level::warn    ? "warning: "
                       : level == Level::error ? "error: "
                       : level == Level::debug ? "debug: "
                                               : "";
  std::lock_guard<std::mutex> lock(output_mutex);
  if (current_rank != 0) std::fprintf(stderr, "[rank %d] ", current_rank);
  std::fprintf(stderr, "%s%s\n", prefix, message.c_str());
  std::fflush(stderr);
}

}  // namespace tune::log
