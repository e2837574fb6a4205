// Locates the shipped configs/ and recipes/ directories.
#include "tune/core/paths.h"

#include <cstdlib>

#ifndef TUNE_SOURCE_ROOT
#define TUNE_SOURCE_ROOT "."
#endif

namespace tune {

std::filesystem::path shipped_root() {
  if (const char* home = std::getenv("TUNE_HOME"); home != nullptr && *home != '\0') return home;
  // An installed binary (cmake --install, scripts/install.sh) finds them at PREFIX/share/tune beside PREFIX/bin.
  std::error_code ignored;
  const auto executable = std::filesystem::read_symlink("/proc/self/exe", ignored);
  const auto installed = executable.parent_path().parent_path() / "share" / "tune";
  if (!executable.empty() && std::filesystem::is_directory(installed / "recipes", ignored)) return installed;
  return TUNE_SOURCE_ROOT;  // a binary run from its build tree
}

}  // namespace tune
