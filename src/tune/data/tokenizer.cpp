// The Tokenizer facade over the tokenizer.json and sentencepiece backends.
#include "tune/data/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "tune/core/error.h"
#include "tune/data/hf/tokenizer_json.h"
#include "tune/data/sentencepiece_backend.h"
#include "tune/data/t5_tokenizer.h"
#include "tune/data/tokenizer_backend.h"
#include "tune/io/json_file.h"

namespace tune::data {
namespace {

constexpr const char* kTokenizerJson = "tokenizer.json";
constexpr const char* kTokenizerModel = "tokenizer.model";
constexpr const char* kTokenizerConfig = "tokenizer_config.json";

// sentencepiece behind the generic backend interface: its ids are int, and it adds BOS/EOS itself as
// Hugging Face's LlamaTokenizer does.
//
// Special-token text (the BOS, EOS, pad and unknown pieces, "<s>", "</s>", ...) maps to its id, as transformers
// splits the text at special tokens before the model sees it (sentencepiece alone would spell "<s>" out in
// characters): a chat template's rendered text then encodes as apply_chat_template encodes it. Text right after a
// special token gets no dummy-prefix "▁", as transformers 5 (legacy=False, its default) encodes a tokenizer.model,
// nor does text that begins with a space (the space is the "▁"): such text is encoded behind the unknown piece's
// text, whose own ids are then dropped (transformers 4's way). With `legacy` (tokenizer_config.json's
// "legacy": true, which transformers honours) text after a special token is prefixed as a text's start is.
class SentencePieceTokenizer final : public TokenizerBackend {
 public:
  SentencePieceTokenizer(std::shared_ptr<SentencePieceBackend> model, bool legacy)
      : model_(std::move(model)), legacy_(legacy) {
    for (int id : {model_->bos_id(), model_->eos_id(), model_->pad_id(), model_->unk_id()}) {
      if (id >= 0 && !model_->id_to_piece(id).empty()) specials_.emplace_back(model_->id_to_piece(id), id);
    }
    // The longest first, so one that another begins with never wins a tie at the same position.
    std::sort(specials_.begin(), specials_.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    if (model_->unk_id() >= 0) {
      sentinel_ = model_->id_to_piece(model_->unk_id());
      sentinel_ids_ = model_->encode(sentinel_);
    }
  }

  std::vector<int64_t> encode(const std::string& text, bool add_bos, bool add_eos) const override {
    std::vector<int64_t> ids;
    if (add_bos && bos_id() >= 0) ids.push_back(bos_id());
    size_t at = 0;
    bool after_special = false;
    while (true) {
      size_t found = std::string::npos;
      const std::pair<std::string, int>* special = nullptr;
      for (const auto& candidate : specials_) {
        const size_t position = text.find(candidate.first, at);
        if (position < found) found = position, special = &candidate;
      }
      const std::vector<int> pieces = encode_run(text.substr(at, found == std::string::npos ? found : found - at),
                                                 after_special);
      ids.insert(ids.end(), pieces.begin(), pieces.end());
      if (special == nullptr) break;
      ids.push_back(special->second);
      at = found + special->first.size();
      after_special = true;
    }
    if (add_eos && eos_id() >= 0) ids.push_back(eos_id());
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> kept(ids.begin(), ids.end());
    return model_->decode(kept);
  }
  std::string id_to_piece(int64_t id) const override { return model_->id_to_piece(static_cast<int>(id)); }
  int64_t piece_to_id(const std::string& piece) const override {
    const int id = model_->piece_to_id(piece);
    // sentencepiece answers unk_id for unknown pieces; only the unknown piece itself really maps there.
    if (id == model_->unk_id() && piece != model_->id_to_piece(id)) return -1;
    return id;
  }
  int64_t vocab_size() const override { return model_->piece_size(); }
  int64_t bos_id() const override { return model_->bos_id(); }
  int64_t eos_id() const override { return model_->eos_id(); }
  int64_t pad_id() const override { return model_->pad_id(); }
  int64_t unk_id() const override { return model_->unk_id(); }
  bool is_special_token(int64_t id) const override { return id == bos_id() || id == eos_id() || id == pad_id(); }

 private:
  std::vector<int> encode_run(const std::string& run, bool after_special) const {
    if (run.empty()) return {};
    // transformers 5 converts a tokenizer.model to a Metaspace pre-tokenizer that prepends "▁" to the text's first
    // run (every run under legacy) unless the run already begins with one, i.e. with a space: sentencepiece's own
    // encode always adds its dummy prefix, so runs that get none are encoded behind the sentinel.
    const bool prefixed = (!after_special || legacy_) && run.front() != ' ';
    if (prefixed || sentinel_ids_.empty()) return model_->encode(run);
    std::vector<int> pieces = model_->encode(sentinel_ + run);
    if (pieces.size() > sentinel_ids_.size() &&
        std::equal(sentinel_ids_.begin(), sentinel_ids_.end(), pieces.begin())) {
      pieces.erase(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(sentinel_ids_.size()));
      return pieces;
    }
    return model_->encode(run);  // the run merged into the sentinel's pieces: keep sentencepiece's own prefix
  }

  std::shared_ptr<SentencePieceBackend> model_;
  bool legacy_;
  std::vector<std::pair<std::string, int>> specials_;  // piece text and id, longest first
  std::string sentinel_;                               // the unknown piece's text, and its ids
  std::vector<int> sentinel_ids_;
};

// tokenizer_config.json's "legacy" beside a tokenizer.model (false when the file or the key is absent, as
// transformers 5 defaults it); anything but a boolean is an InputError naming the file.
bool sentencepiece_legacy(const std::filesystem::path& model_file) {
  const auto config_file = model_file.parent_path() / kTokenizerConfig;
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(config_file, ignored)) return false;
  const nlohmann::json config = io::read_json_file(config_file, "the tokenizer's tokenizer_config.json");
  if (!config.is_object() || !config.contains("legacy") || config.at("legacy").is_null()) return false;
  if (!config.at("legacy").is_boolean()) {
    throw InputError(fmt::format("{}: \"legacy\" must be true or false, got {}", config_file.string(),
                                 config.at("legacy").dump()));
  }
  return config.at("legacy").get<bool>();
}

}  // namespace

bool Tokenizer::directory_has_tokenizer(const std::filesystem::path& directory) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(directory / kTokenizerJson, ignored) ||
         std::filesystem::is_regular_file(directory / kTokenizerModel, ignored) ||
         std::filesystem::is_regular_file(directory / kT5SentencePieceFile, ignored);
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ignored;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ignored)) {
    // T5's spiece.model first: its directory's tokenizer.json, when there is one, is the same tokenizer converted
    // to a Unigram model, which tune's tokenizer.json reader does not implement.
    if (std::filesystem::is_regular_file(path / kT5SentencePieceFile, ignored)) {
      file = path / kT5SentencePieceFile;
    } else {
      file = std::filesystem::is_regular_file(path / kTokenizerJson, ignored) ? path / kTokenizerJson
                                                                              : path / kTokenizerModel;
    }
    if (!std::filesystem::is_regular_file(file, ignored)) {
      throw InputError(fmt::format("{}: no tokenizer.json, tokenizer.model or spiece.model in this directory; HINT: "
                                   "point `tokenizer:` at one", path.string()));
    }
  } else if (!std::filesystem::is_regular_file(path, ignored)) {
    throw InputError(fmt::format("tokenizer '{}' does not exist or is not a file; HINT: set the tokenizer path to a "
                                 "tokenizer.json, a sentencepiece tokenizer.model (scripts/train_tokenizer.sh makes "
                                 "one) or a directory holding one",
                                 path.string()));
  }
  Tokenizer tokenizer;
  tokenizer.path_ = file;
  if (file.extension() == ".json") {
    tokenizer.backend_ = hf::load_tokenizer_json(file);
  } else if (file.filename() == kT5SentencePieceFile) {
    tokenizer.backend_ = load_t5_tokenizer(file);
  } else {
    tokenizer.backend_ =
        std::make_shared<SentencePieceTokenizer>(load_sentencepiece_model(file.string()), sentencepiece_legacy(file));
  }
  return tokenizer;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  return backend_->encode(text, add_bos, add_eos);
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int64_t> kept;
  kept.reserve(ids.size());
  for (int64_t id : ids) {
    if (id == bos_id() || id == eos_id() || id == pad_id()) continue;
    // A model's embedding may be padded past the tokenizer's vocabulary; such ids read as unknown, not a crash.
    if (id < 0 || id >= vocab_size()) {
      if (backend_->unk_id() >= 0) kept.push_back(backend_->unk_id());
      continue;
    }
    kept.push_back(id);
  }
  return backend_->decode(kept);
}

std::string Tokenizer::piece(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return backend_->unk_id() >= 0 ? backend_->id_to_piece(backend_->unk_id()) : "";
  return backend_->id_to_piece(id);
}

int64_t Tokenizer::piece_to_id(const std::string& piece) const { return backend_->piece_to_id(piece); }
bool Tokenizer::is_special_token(int64_t id) const { return backend_->is_special_token(id); }

int64_t Tokenizer::vocab_size() const { return backend_->vocab_size(); }
int64_t Tokenizer::bos_id() const { return backend_->bos_id(); }
int64_t Tokenizer::eos_id() const { return backend_->eos_id(); }
int64_t Tokenizer::pad_id() const { return backend_->pad_id() >= 0 ? backend_->pad_id() : eos_id(); }

bool Tokenizer::is_tokenizer_json() const { return path_.extension() == ".json"; }

std::vector<std::filesystem::path> Tokenizer::files() const {
  std::vector<std::filesystem::path> result{path_};
  std::error_code ignored;
  const auto config = path_.parent_path() / kTokenizerConfig;
  if (std::filesystem::is_regular_file(config, ignored)) result.push_back(config);
  return result;
}

}  // namespace tune::data
