// Finds and dlopen()s libtune_sentencepiece.so in its own symbol scope (see sentencepiece_backend.h for why).
#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>
#include <mutex>

#include "tune/core/error.h"
#include "tune/data/sentencepiece_backend.h"

namespace tune::data {
namespace {

constexpr const char* kModuleFileName = "libtune_sentencepiece.so";

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
    // RTLD_DEEPBIND: sentencepiece resolves protobuf to its own copy; RTLD_LOCAL: nobody else sees that copy.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
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

}  // namespace

std::shared_ptr<SentencePieceBackend> load_sentencepiece_model(const std::string& model_path) {
  static std::once_flag loaded;
  static CreateSentencePieceBackend create = nullptr;
  std::call_once(loaded, [] { create = load_module(); });
  std::string error;
  std::shared_ptr<SentencePieceBackend> backend(create(model_path, &error));
  if (!backend) {
    throw InputError(fmt::format("tokenizer model '{}' is not a readable sentencepiece model: {}", model_path, error));
  }
  return backend;
}

}  // namespace tune::data
