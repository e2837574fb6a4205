// Where the shipped recipes and presets live: $TUNE_HOME if set, else PREFIX/share/tune for an installed binary
// (PREFIX/bin/tune), else the source tree the binary was built from.
#pragma once

#include <filesystem>

namespace tune {

std::filesystem::path shipped_root();
inline std::filesystem::path shipped_configs_dir() { return shipped_root() / "configs"; }
inline std::filesystem::path shipped_recipes_dir() { return shipped_root() / "recipes"; }

}  // namespace tune
