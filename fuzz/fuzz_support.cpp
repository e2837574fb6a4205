// Scratch files for the fuzz targets (fuzz_support.h).
#include "fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace tune::fuzz {

namespace {

std::filesystem::path make_scratch_dir() {
  // scripts/fuzz.sh names a directory it removes afterwards: a crashing run exits without the handler below.
  std::error_code error;
  const char* chosen = std::getenv("TUNE_FUZZ_SCRATCH");
  std::filesystem::path base = chosen != nullptr && *chosen != '\0' ? chosen : "/dev/shm";
  if (!std::filesystem::is_directory(base, error)) base = std::filesystem::temp_directory_path();
  std::filesystem::path dir = base / ("tune-fuzz-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir, error);  // a previous process with the same id that died without cleaning up
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

const std::filesystem::path& scratch_dir() {
  // Never destroyed, so that the exit handler can still read it after static destructors have run.
  static const std::filesystem::path* const dir = [] {
    auto* made = new std::filesystem::path(make_scratch_dir());
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return made;
  }();
  return *dir;
}

std::filesystem::path write_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();  // not a finding in the parser, but nothing this run tests would be meaningful
  }
  return path;
}

std::vector<std::string_view> split(std::string_view input, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (size_t at = input.find(separator); at != std::string_view::npos; at = input.find(separator)) {
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + separator.size());
  }
  parts.push_back(input);
  return parts;
}

}  // namespace tune::fuzz
