// The sentencepiece tokenizer wrapper: HF LlamaTokenizer's BOS/EOS conventions over sentencepiece.
#include "tune/data/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/data/sentencepiece_backend.h"

namespace tune::data {

Tokenizer Tokenizer::load(const std::filesystem::path& model_path) {
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(model_path, ignored)) {
    throw InputError(fmt::format("tokenizer model '{}' does not exist or is not a file; HINT: set the tokenizer "
                                 "path to a sentencepiece tokenizer.model (scripts/train_tokenizer.sh makes one)",
                                 model_path.string()));
  }
  auto backend = load_sentencepiece_model(model_path.string());
  Tokenizer tokenizer;
  tokenizer.backend_ = std::move(backend);
  tokenizer.path_ = model_path;
  return tokenizer;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  const std::vector<int> pieces = backend_->encode(text);
  std::vector<int64_t> ids;
  ids.reserve(pieces.size() + 2);
  if (add_bos && bos_id() >= 0) ids.push_back(bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  if (add_eos && eos_id() >= 0) ids.push_back(eos_id());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (int64_t id : ids) {
    if (id == bos_id() || id == eos_id() || id == pad_id()) continue;
    // A model's embedding may be padded past the tokenizer's vocabulary; such ids read as unknown, not a crash.
    kept.push_back(id >= 0 && id < vocab_size() ? static_cast<int>(id) : backend_->unk_id());
  }
  return backend_->decode(kept);
}

std::string Tokenizer::piece(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return backend_->id_to_piece(backend_->unk_id());
  return backend_->id_to_piece(static_cast<int>(id));
}

int64_t Tokenizer::piece_to_id(const std::string& piece) const {
  const int id = backend_->piece_to_id(piece);
  // sentencepiece answers unk_id for unknown pieces; only the unknown piece itself really maps there.
  if (id == backend_->unk_id() && piece != backend_->id_to_piece(id)) return -1;
  return id;
}

int64_t Tokenizer::vocab_size() const { return backend_->piece_size(); }
int64_t Tokenizer::bos_id() const { return backend_->bos_id(); }
int64_t Tokenizer::eos_id() const { return backend_->eos_id(); }
int64_t Tokenizer::pad_id() const { return backend_->pad_id() >= 0 ? backend_->pad_id() : eos_id(); }

}  // namespace tune::data
