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
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(fmt::format("{}: invalid JSON: {}", path.string(), error.what()));
  }
}

void write_json_file(const std::filesystem::path& path, const nlohmann::json& json) {
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) throw Error(fmt::format("{}: write failed", path.string()));
}

}  // namespace tune::io
