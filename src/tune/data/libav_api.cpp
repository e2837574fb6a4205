// Loading FFmpeg's libraries on first use (libav_api.h).
#include "tune/data/libav_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <string>

#include "tune/core/error.h"
#include "tune/core/log.h"

namespace tune::data::libav {

namespace {

std::atomic<bool> g_loaded{false};

struct Library {
  std::string file;     // e.g. libavformat.so.59: the major version the headers declare
  const char* package;  // Debian's package for it, for the error message
};

void* open_library(const Library& library) {
  void* handle = dlopen(library.file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error(fmt::format("cannot load FFmpeg's {} to read or write video and images: {} (install the {} package, "
                            "the version tune was built against)",
                            library.file, why != nullptr ? why : "not found", library.package));
  }
  return handle;
}

Api load() {
  // Handles stay open for the life of the process: the functions are called until exit.
  const std::array<Library, 4> libraries = {
      Library{fmt::format("libavformat.so.{}", LIBAVFORMAT_VERSION_MAJOR), "libavformat"},
      Library{fmt::format("libavcodec.so.{}", LIBAVCODEC_VERSION_MAJOR), "libavcodec"},
      Library{fmt::format("libavutil.so.{}", LIBAVUTIL_VERSION_MAJOR), "libavutil"},
      Library{fmt::format("libswscale.so.{}", LIBSWSCALE_VERSION_MAJOR), "libswscale"}};
  std::array<void*, 4> handles{};
  for (size_t i = 0; i < libraries.size(); ++i) handles[i] = open_library(libraries[i]);
  const auto resolve = [&](const char* name) {
    for (void* handle : handles) {
      if (void* symbol = dlsym(handle, name)) return symbol;
    }
    throw Error(fmt::format("FFmpeg's libraries ({}, {}, {}, {}) have no function {}: not the version tune was "
                            "built against",
                            libraries[0].file, libraries[1].file, libraries[2].file, libraries[3].file, name));
  };
  Api api;
#define TUNE_LIBAV_RESOLVE(name) api.name = reinterpret_cast<decltype(&::name)>(resolve(#name));
  TUNE_LIBAV_FUNCTIONS(TUNE_LIBAV_RESOLVE)
#undef TUNE_LIBAV_RESOLVE
  log::debug("loaded FFmpeg's {}, {}, {} and {} for video and image files", libraries[0].file, libraries[1].file,
             libraries[2].file, libraries[3].file);
  g_loaded.store(true);
  return api;
}

}  // namespace

const Api& api() {
  static const Api functions = load();  // a throwing load leaves it uninitialised: the next call tries again
  return functions;
}

bool loaded() { return g_loaded.load(); }

}  // namespace tune::data::libav
