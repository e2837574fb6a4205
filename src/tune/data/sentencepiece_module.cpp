// libtune_sentencepiece.so: SentencePieceBackend over sentencepiece's processor, the only code that links
// libsentencepiece (see sentencepiece_backend.h for why it lives in its own dlopen()ed module).
#include <sentencepiece_processor.h>

#include "tune/data/sentencepiece_backend.h"

namespace {

class ProcessorBackend final : public tune::data::SentencePieceBackend {
 public:
  sentencepiece::SentencePieceProcessor processor;

  std::vector<int> encode(const std::string& text) const override { return processor.EncodeAsIds(text); }
  std::string decode(const std::vector<int>& ids) const override { return processor.DecodeIds(ids); }
  int piece_size() const override { return processor.GetPieceSize(); }
  int piece_to_id(const std::string& piece) const override { return processor.PieceToId(piece); }
  std::string id_to_piece(int id) const override { return processor.IdToPiece(id); }
  int unk_id() const override { return processor.unk_id(); }
  int bos_id() const override { return processor.bos_id(); }
  int eos_id() const override { return processor.eos_id(); }
  int pad_id() const override { return processor.pad_id(); }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) tune::data::SentencePieceBackend* tune_create_sentencepiece_backend(
    const std::string& model_path, const std::string* serialized, std::string* error) {
  auto backend = std::make_unique<ProcessorBackend>();
  const auto status = serialized != nullptr ? backend->processor.LoadFromSerializedProto(*serialized)
                                            : backend->processor.Load(model_path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return backend.release();
}
