// A file's extension in lower case (".MP4" -> ".mp4"), for choosing readers and writers by extension.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>

namespace tune::data {

inline std::string lower_extension(const std::filesystem::path& file) {
  std::string extension = file.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension;
}

}  // namespace tune::data
