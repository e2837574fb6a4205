// Finds and dlopen()s libtune_sentencepiece.so in its own symbol scope (see sentencepiece_backend.h for why).
#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>
#include <mutex>

#include "tune/core/error.h"
#include "tune/data/sentencepiece_backend.h"

// AddressSanitizer builds (scripts/test.sh --sanitize): GCC defines __SANITIZE_ADDRESS__, clang has the feature test.
#if defined(__SANITIZE_ADDRESS__)
#define TUNE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TUNE_ASAN 1
#endif
#endif

namespace tune::data {
namespace {

constexpr const char* kModuleFileName = "libtune_sentencepiece.so";
constexpr int kOpenFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;

#ifndef TUNE_ASAN
// RTLD_DEEPBIND: sentencepiece resolves protobuf (and its FLAGS_minloglevel, a 32-byte object that LibTorch's c10
// also exports, as a 4-byte int) to its own copy; RTLD_LOCAL: nobody else sees that copy.
void* open_module(const std::filesystem::path& path) { return dlopen(path.c_str(), kOpenFlags); }
#else
// Under AddressSanitizer the same flags, by another door. ASan's dlopen() refuses RTLD_DEEPBIND outright, because a
// deep-bound library normally finds libc's malloc, free and operator new ahead of the sanitizer's and mixes two
// heaps (google/sanitizers#611). Dropping RTLD_DEEPBIND would be worse: sentencepiece's FLAGS_minloglevel would
// bind to c10's smaller object and its constructor would overwrite c10's memory. A module built with
// -fsanitize=address lists the sanitizer runtime first among its dependencies (GCC's libasan.so, clang's with
// -shared-libasan), so its deep-bound lookups reach the sanitizer's allocator first. That is checked below on the
// loaded module (RTLD_NOW has bound every symbol), and a module that fails it is refused; one built without the
// sanitizer fails loudly anyway (ASan reports sentencepiece's constructors mixing the heaps while it loads).
// dlmopen(LM_ID_BASE) is dlopen in the main namespace, and ASan does not intercept it.
void* open_module(const std::filesystem::path& path) {
  void* handle = dlmopen(LM_ID_BASE, path.c_str(), kOpenFlags);
  if (handle == nullptr) return nullptr;
  for (const char* symbol : {"malloc", "free", "_Znwm", "_ZdlPv"}) {
    if (dlsym(handle, symbol) != dlsym(RTLD_DEFAULT, symbol)) {
      dlclose(handle);
      throw Error(fmt::format("{}: under AddressSanitizer the module's {} is not the sanitizer's (the module must be "
                              "linked with -fsanitize=address and list the sanitizer runtime as its first "
                              "dependency)", path.string(), symbol));
    }
  }
  return handle;
}
#endif

// Where to look: $TUNE_SENTENCEPIECE_MODULE, the build tree's path, then lib/ beside or above the executable
// (a build tree copied elsewhere keeps the module at build/lib/).
std::vector<std::filesystem::path> module_candidates() {
  std::vector<std::filesystem::path> candidates;
  if (const char* override_path = std::getenv("TUNE_SENTENCEPIECE_MODULE")) candidates.emplace_back(override_path);
#ifdef TUNE_SENTENCEPIECE_MODULE_PATH
  candidates.emplace_back(TUNE_SENTENCEPIECE_MODULE_PATH);
#endif
  std::error_code ignored;
  auto directory = std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path();
  for (int level = 0; level < 5 && !directory.empty(); ++level, directory = directory.parent_path()) {
    candidates.push_back(directory / kModuleFileName);
    candidates.push_back(directory / "lib" / kModuleFileName);
  }
  return candidates;
}

CreateSentencePieceBackend load_module() {
  std::string attempts;
  for (const auto& candidate : module_candidates()) {
    std::error_code ignored;
    if (!std::filesystem::is_regular_file(candidate, ignored)) continue;
    void* handle = open_module(candidate);
    if (handle == nullptr) {
      attempts += fmt::format("\n  {}: {}", candidate.string(), dlerror());
      continue;
    }
    if (void* symbol = dlsym(handle, kCreateSentencePieceBackendSymbol)) {
      return reinterpret_cast<CreateSentencePieceBackend>(symbol);
    }
    attempts += fmt::format("\n  {}: no symbol {}", candidate.string(), kCreateSentencePieceBackendSymbol);
  }
  throw Error(fmt::format("cannot load the sentencepiece module {}{}; HINT: build the tune_sentencepiece target or "
                          "set TUNE_SENTENCEPIECE_MODULE to its path",
                          kModuleFileName, attempts.empty() ? " (not found)" : attempts));
}

CreateSentencePieceBackend module_entry() {
  static std::once_flag loaded;
  static CreateSentencePieceBackend create = nullptr;
  std::call_once(loaded, [] { create = load_module(); });
  return create;
}

std::shared_ptr<SentencePieceBackend> create_backend(const std::string& model_path, const std::string* serialized) {
  std::string error;
  std::shared_ptr<SentencePieceBackend> backend(module_entry()(model_path, serialized, &error));
  if (!backend) {
    throw InputError(fmt::format("tokenizer model '{}' is not a readable sentencepiece model: {}", model_path, error));
  }
  return backend;
}

}  // namespace

std::shared_ptr<SentencePieceBackend> load_sentencepiece_model(const std::string& model_path) {
  return create_backend(model_path, nullptr);
}

std::shared_ptr<SentencePieceBackend> load_sentencepiece_model_from_bytes(const std::string& model_path,
                                                                         const std::string& serialized) {
  return create_backend(model_path, &serialized);
}

}  // namespace tune::data
