// JSON file helpers shared by model configs and run checkpoints.
#include "tune/io/json_file.h"

#include <fmt/format.h>

#include <fstream>

#include "tune/core/error.h"

namespace tune::io {

nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open {}", path.string(), what));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for a number like 1e999
    throw InputError(fmt::format("{}: invalid JSON: {}", path.string(), error.what()));
  }
}

void write_json_file(const std::filesystem::path& path, const nlohmann::json& json) {
  // Written beside the target and renamed over it: a reader never sees half a file, an old one survives a crash.
  auto temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary);
    out << json.dump(2) << "\n";
    out.flush();
    if (!out) throw Error(fmt::format("{}: write failed", path.string()));
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw Error(fmt::format("{}: cannot replace: {}", path.string(), error.message()));
}

}  // namespace tune::io
