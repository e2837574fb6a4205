// Reading and writing small JSON files (configs, trainer state) with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace tune::io {

// Throws tune::InputError "PATH: cannot open WHAT" or "PATH: invalid JSON: ...".
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& what = "the JSON file");
// Pretty-printed, atomically (temporary file + rename); throws tune::Error naming the file when the write fails.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& json);

}  // namespace tune::io
