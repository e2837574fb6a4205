// Logging to stderr with fmt. Only rank 0 prints info lines in distributed runs; warnings and errors always print.
#pragma once

#include <fmt/format.h>

#include <string>

namespace tune::log {

enum class Level { debug, info, warn, error };

void set_level(Level level);  // -v: debug, default: info, -q: warnings and errors only
bool enabled(Level level);     // whether lines of `level` print (progress output asks before drawing)
void set_rank(int rank);  // lines from ranks other than 0 are prefixed and info is suppressed
int rank();
void write(Level level, const std::string& message);

template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::error, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::debug, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tune::log
