// The tokenizer.json pipeline as a TokenizerBackend (see tokenizer_json.h).
#include "tune/data/hf/tokenizer_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>

#include "tune/core/error.h"
#include "tune/data/hf/added_tokens.h"
#include "tune/data/hf/bpe_model.h"
#include "tune/data/hf/decoder.h"
#include "tune/data/hf/normalizer.h"
#include "tune/data/hf/pre_tokenizer.h"
#include "tune/data/hf/text_utils.h"
#include "tune/data/hf/token_ids.h"

namespace tune::data::hf {
namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot be opened", path.string()));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), error.what()));
  }
}

// The special tokens a post-processor adds before and after the sequence.
struct PostProcessor {
  std::vector<int64_t> prefix, suffix;
};

std::vector<int64_t> special_ids(const nlohmann::json& special_tokens, const std::string& name, const std::string& where) {
  const auto found = special_tokens.find(name);
  if (found == special_tokens.end()) {
    throw InputError(fmt::format("{}: template names special token '{}' that special_tokens does not define", where, name));
  }
  return token_ids(found->at("ids"), fmt::format("{}: special token '{}'", where, name));
}

PostProcessor make_post_processor(const nlohmann::json& spec, const std::string& source) {
  PostProcessor post;
  if (spec.is_null()) return post;
  const std::string type = spec.at("type").get<std::string>();
  const std::string where = fmt::format("{}: post_processor {}", source, type);
  if (type == "ByteLevel") return post;  // offsets only
  if (type == "TemplateProcessing") {
    bool after_sequence = false;
    for (const auto& item : spec.at("single")) {
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const auto ids = special_ids(spec.at("special_tokens"), item.at("SpecialToken").at("id").get<std::string>(), where);
      auto& target = after_sequence ? post.suffix : post.prefix;
      target.insert(target.end(), ids.begin(), ids.end());
    }
    return post;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    post.prefix = {token_id(spec.at("cls").at(1), where + " cls")};
    post.suffix = {token_id(spec.at("sep").at(1), where + " sep")};
    return post;
  }
  if (type == "Sequence") {
    for (const auto& part : spec.at("processors")) {
      const PostProcessor inner = make_post_processor(part, source);
      post.prefix.insert(post.prefix.end(), inner.prefix.begin(), inner.prefix.end());
      post.suffix.insert(post.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return post;
  }
  throw InputError(fmt::format("{}: post_processor type '{}' is not supported (supported: TemplateProcessing, ByteLevel, "
                               "BertProcessing, RobertaProcessing, Sequence)",
                               source, type));
}

// tokenizer_config.json names tokens as a string or as an AddedToken object ({"content": ...}).
std::optional<std::string> token_name(const nlohmann::json& config, const char* key) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return std::nullopt;
  if (found->is_string()) return found->get<std::string>();
  if (found->is_object() && found->contains("content")) return found->at("content").get<std::string>();
  return std::nullopt;
}

class TokenizerJson final : public TokenizerBackend {
 public:
  explicit TokenizerJson(const std::filesystem::path& path)
      : source_(path.string()),
        spec_(read_json(path)),
        added_(spec_.value("added_tokens", nlohmann::json()), source_),
        model_(checked_model(spec_.at("model"), source_), source_),
        normalizer_(make_normalizer(spec_.value("normalizer", nlohmann::json()), source_)),
        pre_tokenizer_(make_pre_tokenizer(spec_.value("pre_tokenizer", nlohmann::json()), source_)),
        post_(make_post_processor(spec_.value("post_processor", nlohmann::json()), source_)),
        decoder_(make_decoder(spec_.value("decoder", nlohmann::json()), source_)) {
    const auto config_path = path.parent_path() / "tokenizer_config.json";
    nlohmann::json config = nlohmann::json::object();
    if (std::filesystem::exists(config_path)) config = read_json(config_path);
    auto id_of = [&](const char* key) -> int64_t {
      const auto name = token_name(config, key);
      if (!name) return -1;
      const int64_t id = piece_to_id(*name);
      if (id < 0) {
        throw InputError(fmt::format("{}: {} '{}' is not a token of {}", config_path.string(), key, *name, source_));
      }
      return id;
    };
    bos_ = id_of("bos_token");
    eos_ = id_of("eos_token");
    pad_ = id_of("pad_token");
    unk_ = id_of("unk_token");
    if (bos_ < 0 && !post_.prefix.empty()) bos_ = post_.prefix.front();
    if (eos_ < 0 && !post_.suffix.empty()) eos_ = post_.suffix.back();
    spec_ = nlohmann::json();  // parsed into the members above; the vocabulary is large
  }

  std::vector<int64_t> encode(const std::string& raw, bool add_bos, bool add_eos) const override {
    const std::string text = sanitize(raw);
    std::vector<int64_t> ids;
    if (add_bos) ids.insert(ids.end(), post_.prefix.begin(), post_.prefix.end());
    for (const Segment& segment : added_.split(text)) {
      if (segment.token_id >= 0) {
        ids.push_back(segment.token_id);
        continue;
      }
      const std::string normalized = normalizer_(segment.text);
      for (const Piece& piece : pre_tokenizer_({Piece{normalized, segment.begin == 0}})) model_.encode(piece.text, ids);
    }
    if (add_eos) ids.insert(ids.end(), post_.suffix.begin(), post_.suffix.end());
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int64_t id : ids) tokens.push_back(id_to_piece(id));
    std::string text;
    for (const auto& part : decoder_(std::move(tokens))) text += part;
    return text;
  }

  std::string id_to_piece(int64_t id) const override {
    if (const AddedToken* token = added_.by_id(id)) return token->content;
    const std::string* token = model_.id_to_token(id);
    return token != nullptr ? *token : std::string();
  }

  int64_t piece_to_id(const std::string& piece) const override {
    if (const AddedToken* token = added_.by_content(piece)) return token->id;
    return model_.token_to_id(piece);
  }

  int64_t vocab_size() const override { return std::max(model_.max_id(), added_.max_id()) + 1; }
  int64_t bos_id() const override { return bos_; }
  int64_t eos_id() const override { return eos_; }
  int64_t pad_id() const override { return pad_; }
  int64_t unk_id() const override { return unk_; }
  bool is_special_token(int64_t id) const override {
    const AddedToken* token = added_.by_id(id);
    return token != nullptr && token->special;
  }

 private:
  static const nlohmann::json& checked_model(const nlohmann::json& model, const std::string& source) {
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") {
      throw InputError(fmt::format("{}: model type '{}' is not supported (supported: BPE, which Llama, Qwen, Gemma "
                                   "and Mistral tokenizers use)",
                                   source, type));
    }
    return model;
  }

  std::string source_;
  nlohmann::json spec_;
  AddedTokens added_;
  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  PostProcessor post_;
  Decoder decoder_;
  int64_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
};

}  // namespace

std::shared_ptr<TokenizerBackend> load_tokenizer_json(const std::filesystem::path& tokenizer_json) {
  try {
    return std::make_shared<TokenizerJson>(tokenizer_json);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: unexpected tokenizer.json structure: {}", tokenizer_json.string(), error.what()));
  }
}

}  // namespace tune::data::hf
