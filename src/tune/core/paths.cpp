// Locates the shipped configs/ and recipes/ directories.
#include "tune/core/paths.h"

#include <cstdlib>

#ifndef TUNE_SOURCE_ROOT
#define TUNE_SOURCE_ROOT "."
#endif

namespace tune {

std::filesystem::path shipped_root() {
  if (const char* home = std::getenv("TUNE_HOME"); home != nullptr && *home != '\0') return home;
  return TUNE_SOURCE_ROOT;
}

}  // namespace tune
