// The sentencepiece calls the Tokenizer needs, behind an interface implemented in a separately loaded module.
//
// Why a module: Debian's libsentencepiece carries its own copy of protobuf-lite (3.14) and exports its symbols,
// while LibTorch loads the system libprotobuf (3.21). Linked into one program, whichever comes first in the
// global symbol scope serves both, and the program crashes before main() (protobuf's static initialisation,
// or its version check). tokenizer.cpp therefore dlopen()s libtune_sentencepiece.so with RTLD_LOCAL |
// RTLD_DEEPBIND, so sentencepiece binds to its own protobuf and the rest of the process never sees it. Only
// virtual calls and standard-library types cross the boundary, so nothing else needs to resolve by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tune::data {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  virtual std::vector<int> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  virtual int piece_size() const = 0;
  virtual int piece_to_id(const std::string& piece) const = 0;
  virtual std::string id_to_piece(int id) const = 0;
  virtual int unk_id() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
};

// The module's one exported entry point: a loaded model, or nullptr with *error set. The model is read from
// `model_path`, or parsed from `serialized` (a ModelProto's bytes) when that is not null.
using CreateSentencePieceBackend = SentencePieceBackend* (*)(const std::string& model_path,
                                                             const std::string* serialized, std::string* error);
constexpr const char* kCreateSentencePieceBackendSymbol = "tune_create_sentencepiece_backend";

// Loads the module (once per process) and the model; throws tune::Error when the module cannot be loaded and
// tune::InputError when the model cannot.
std::shared_ptr<SentencePieceBackend> load_sentencepiece_model(const std::string& model_path);

// The same from a ModelProto's bytes (a model tune rewrote); `model_path` only names it in errors.
std::shared_ptr<SentencePieceBackend> load_sentencepiece_model_from_bytes(const std::string& model_path,
                                                                         const std::string& serialized);

}  // namespace tune::data
