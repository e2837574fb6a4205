// T5's spiece.model behind the TokenizerBackend interface, with transformers 5's T5Tokenizer conventions.
#include "tune/data/t5_tokenizer.h"

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "tune/core/error.h"
#include "tune/data/hf/precompiled_charsmap.h"
#include "tune/data/sentencepiece_backend.h"
#include "tune/data/sentencepiece_model_proto.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::data {
namespace {

constexpr const char* kTokenizerConfig = "tokenizer_config.json";
constexpr const char* kAddedTokens = "added_tokens.json";
constexpr int64_t kDefaultExtraIds = 100;  // T5Tokenizer's default

std::string sentinel_text(int64_t index) { return fmt::format("<extra_id_{}>", index); }

class T5Tokenizer final : public TokenizerBackend {
 public:
  // `model` as stored (pieces, decoding); `unnormalized` the same model with its normalization map removed, to
  // encode text `normalization` has already normalized as transformers does.
  T5Tokenizer(std::shared_ptr<SentencePieceBackend> model, std::shared_ptr<SentencePieceBackend> unnormalized,
              hf::PrecompiledCharsMap normalization, int64_t extra_ids)
      : model_(std::move(model)),
        unnormalized_(std::move(unnormalized)),
        normalization_(std::move(normalization)),
        pieces_(model_->piece_size()),
        extra_ids_(extra_ids) {
    for (int id : {model_->pad_id(), model_->eos_id(), model_->unk_id()}) {
      specials_.emplace_back(model_->id_to_piece(id), id);
    }
    for (int64_t index = 0; index < extra_ids_; ++index) specials_.emplace_back(sentinel_text(index), sentinel_id(index));
  }

  std::vector<int64_t> encode(const std::string& text, bool /*add_bos: T5 has none*/, bool add_eos) const override {
    std::vector<int64_t> ids;
    size_t run_begin = 0;
    for (size_t at = 0; at < text.size();) {
      const std::pair<std::string, int64_t>* special = longest_special_at(text, at);
      if (special == nullptr) {
        ++at;
        continue;
      }
      encode_run(text.substr(run_begin, at - run_begin), ids);
      ids.push_back(special->second);
      at += special->first.size();
      run_begin = at;
    }
    encode_run(text.substr(run_begin), ids);
    if (add_eos) ids.push_back(eos_id());
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    std::vector<int> run;
    auto flush = [&] {
      if (!run.empty()) text += model_->decode(run);
      run.clear();
    };
    for (int64_t id : ids) {
      if (is_sentinel(id)) {
        flush();
        text += sentinel_text(pieces_ + extra_ids_ - 1 - id);
      } else {
        run.push_back(static_cast<int>(id));
      }
    }
    flush();
    return text;
  }

  std::string id_to_piece(int64_t id) const override {
    if (is_sentinel(id)) return sentinel_text(pieces_ + extra_ids_ - 1 - id);
    if (id < 0 || id >= pieces_) return "";
    return model_->id_to_piece(static_cast<int>(id));
  }

  int64_t piece_to_id(const std::string& piece) const override {
    for (const auto& special : specials_) {
      if (special.first == piece) return special.second;
    }
    const int id = model_->piece_to_id(piece);
    // sentencepiece answers unk_id for unknown pieces; only the unknown piece itself really maps there.
    if (id == model_->unk_id() && piece != model_->id_to_piece(id)) return -1;
    return id;
  }

  int64_t vocab_size() const override { return pieces_ + extra_ids_; }
  int64_t bos_id() const override { return -1; }
  int64_t eos_id() const override { return model_->eos_id(); }
  int64_t pad_id() const override { return model_->pad_id(); }
  int64_t unk_id() const override { return model_->unk_id(); }
  bool is_special_token(int64_t id) const override { return id == eos_id() || id == pad_id() || is_sentinel(id); }

  int64_t pieces() const { return pieces_; }
  int64_t extra_ids() const { return extra_ids_; }

  // The id T5Tokenizer gives `token` as an added (special) token, or -1 when it is not one.
  int64_t special_token_id(const std::string& token) const {
    for (const auto& special : specials_) {
      if (special.first == token) return special.second;
    }
    return -1;
  }

 private:
  int64_t sentinel_id(int64_t index) const { return pieces_ + extra_ids_ - 1 - index; }
  bool is_sentinel(int64_t id) const { return id >= pieces_ && id < pieces_ + extra_ids_; }

  // transformers' added-token split is leftmost-longest: at the first position where any special token starts,
  // the longest one that does.
  const std::pair<std::string, int64_t>* longest_special_at(const std::string& text, size_t at) const {
    const std::pair<std::string, int64_t>* best = nullptr;
    for (const auto& special : specials_) {
      if (special.first.empty() || (best != nullptr && special.first.size() <= best->first.size())) continue;
      if (text.compare(at, special.first.size(), special.first) == 0) best = &special;
    }
    return best;
  }

  // Text between special tokens: normalized by the model's map as transformers' Precompiled normalizer does, then
  // sentencepiece (not normalizing again) splits and prefixes words as the `tokenizers` pipeline does, once U+0085
  // (UTF-8 C2 85), whitespace to `tokenizers` only, is a space.
  void encode_run(const std::string& raw_run, std::vector<int64_t>& ids) const {
    if (raw_run.empty()) return;
    const std::string run = normalization_.normalize(raw_run);
    std::string text;
    text.reserve(run.size());
    for (size_t at = 0; at < run.size(); ++at) {
      const bool next_line = run[at] == '\xC2' && at + 1 < run.size() && run[at + 1] == '\x85';
      text += next_line ? ' ' : run[at];
      if (next_line) ++at;
    }
    for (int id : unnormalized_->encode(text)) ids.push_back(id);
  }

  std::shared_ptr<SentencePieceBackend> model_;
  std::shared_ptr<SentencePieceBackend> unnormalized_;
  hf::PrecompiledCharsMap normalization_;
  int64_t pieces_;
  int64_t extra_ids_;
  std::vector<std::pair<std::string, int64_t>> specials_;  // text and id: pad, EOS, unknown, the sentinels
};

// A special piece T5 needs (pad, EOS, unknown) that the model lacks: transformers would add one after the
// sentinels, which no T5 checkpoint's embedding expects.
void require_piece(const SentencePieceBackend& model, int id, const char* role, const std::filesystem::path& file) {
  if (id < 0 || model.id_to_piece(id).empty()) {
    throw InputError(fmt::format("{}: the sentencepiece model has no {} piece, which T5's tokenizer needs (T5's "
                                 "spiece.model has <pad> 0, </s> 1, <unk> 2)", file.string(), role));
  }
}

// added_tokens.json ({"<extra_id_0>": 32099, ...}) or tokenizer_config.json's added_tokens_decoder
// ({"32099": {"content": "<extra_id_0>", ...}}) may restate T5's own special tokens; any other token would be one
// tune does not encode.
// `where` locates the entry in the file ("" or "field 'added_tokens_decoder': ").
void check_added_token(const T5Tokenizer& tokenizer, const std::string& token, int64_t id,
                       const std::filesystem::path& file, const std::string& where) {
  const int64_t expected = tokenizer.special_token_id(token);
  if (expected == id) return;
  if (expected < 0 && tokenizer.piece_to_id(token) == id) return;  // a piece of the model at its own id
  throw InputError(fmt::format(
      "{}: {}token '{}' is given id {}, but T5's tokenizer ({} sentencepiece pieces, then {} <extra_id_N> sentinels "
      "in reverse) {}; tune encodes only T5's own special tokens",
      file.string(), where, token, id, tokenizer.pieces(), tokenizer.extra_ids(),
      expected >= 0 ? fmt::format("gives it id {}", expected) : std::string("does not have it")));
}

void check_added_tokens_json(const T5Tokenizer& tokenizer, const std::filesystem::path& file) {
  const nlohmann::json json = io::read_json_file(file, "the tokenizer's added_tokens.json");
  if (!json.is_object()) throw InputError(fmt::format("{}: expected an object of token -> id", file.string()));
  for (const auto& item : json.items()) {
    if (!item.value().is_number_integer()) {
      throw InputError(fmt::format("{}: token '{}' must map to an integer id, got {}", file.string(), item.key(),
                                   item.value().dump()));
    }
    check_added_token(tokenizer, item.key(), item.value().get<int64_t>(), file, "");
  }
}

// tokenizer_config.json: the class it names and the sentinel count; returns extra_ids.
int64_t read_tokenizer_config(const nlohmann::json& json, const std::filesystem::path& file) {
  const io::JsonFields reader(json, file.string());
  const std::string tokenizer_class = reader.string("tokenizer_class", "T5Tokenizer");
  if (tokenizer_class != "T5Tokenizer" && tokenizer_class != "T5TokenizerFast") {
    reader.fail("tokenizer_class", fmt::format("is '{}'; a directory with spiece.model is read as T5's tokenizer "
                                               "(T5Tokenizer), whose conventions another class may not share",
                                               tokenizer_class));
  }
  const int64_t extra_ids = reader.integer("extra_ids", kDefaultExtraIds);
  if (extra_ids < 0) reader.fail("extra_ids", fmt::format("must be >= 0, got {}", extra_ids));
  return extra_ids;
}

void check_added_tokens_decoder(const T5Tokenizer& tokenizer, const nlohmann::json& json,
                                const std::filesystem::path& file) {
  if (!json.contains("added_tokens_decoder") || json.at("added_tokens_decoder").is_null()) return;
  const nlohmann::json& decoder = json.at("added_tokens_decoder");
  if (!decoder.is_object()) {
    throw InputError(fmt::format("{}: field 'added_tokens_decoder' must be an object of id -> token", file.string()));
  }
  for (const auto& item : decoder.items()) {
    int64_t id = -1;
    try {
      id = std::stoll(item.key());
    } catch (const std::exception&) {
      throw InputError(fmt::format("{}: field 'added_tokens_decoder' has key '{}', not an id", file.string(), item.key()));
    }
    const nlohmann::json& token = item.value();
    const nlohmann::json* content = token.is_object() && token.contains("content") ? &token.at("content") : &token;
    if (!content->is_string()) {
      throw InputError(fmt::format("{}: field 'added_tokens_decoder.{}' must hold the token's \"content\" string",
                                   file.string(), item.key()));
    }
    check_added_token(tokenizer, content->get<std::string>(), id, file, "field 'added_tokens_decoder': ");
  }
}

std::string read_model_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open the sentencepiece model", file.string()));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

std::shared_ptr<TokenizerBackend> load_t5_tokenizer(const std::filesystem::path& spiece_model) {
  const std::filesystem::path directory = spiece_model.parent_path();
  std::error_code ignored;
  nlohmann::json config = nlohmann::json::object();
  const auto config_path = directory / kTokenizerConfig;
  if (std::filesystem::is_regular_file(config_path, ignored)) {
    config = io::read_json_file(config_path, "the tokenizer's tokenizer_config.json");
    if (!config.is_object()) throw InputError(fmt::format("{}: expected a JSON object", config_path.string()));
  }
  const int64_t extra_ids = read_tokenizer_config(config, config_path);

  std::shared_ptr<SentencePieceBackend> model = load_sentencepiece_model(spiece_model.string());
  require_piece(*model, model->pad_id(), "pad", spiece_model);
  require_piece(*model, model->eos_id(), "EOS", spiece_model);
  require_piece(*model, model->unk_id(), "unknown", spiece_model);
  const std::string model_bytes = read_model_bytes(spiece_model);
  hf::PrecompiledCharsMap normalization(sentencepiece_normalization_map(model_bytes, spiece_model.string()),
                                        spiece_model.string());
  auto unnormalized = load_sentencepiece_model_from_bytes(
      spiece_model.string(), sentencepiece_model_without_normalization_map(model_bytes, spiece_model.string()));
  auto tokenizer =
      std::make_shared<T5Tokenizer>(std::move(model), std::move(unnormalized), std::move(normalization), extra_ids);

  check_added_tokens_decoder(*tokenizer, config, config_path);
  const auto added_tokens = directory / kAddedTokens;
  if (std::filesystem::is_regular_file(added_tokens, ignored)) check_added_tokens_json(*tokenizer, added_tokens);
  return tokenizer;
}

}  // namespace tune::data
