// Byte-pair encoding over a ranked merge table (see bpe_model.h).
#include "tune/data/hf/bpe_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <queue>

#include "tune/core/error.h"
#include "tune/data/hf/text_utils.h"

namespace tune::data::hf {
namespace {

constexpr size_t kCacheCapacity = 100000;

uint64_t pair_key(int64_t left, int64_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(static_cast<uint32_t>(right));
}

std::string json_string_or_empty(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? std::string() : found->get<std::string>();
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& source) {
  const std::string where = source + " model (BPE)";
  if (model.value("dropout", nlohmann::json()).is_number() && model["dropout"].get<double>() > 0) {
    throw InputError(where + ": dropout is not supported (a training-time option; set it to null)");
  }
  for (const auto& [token, id] : model.at("vocab").items()) {
    const int64_t value = id.get<int64_t>();
    vocab_.emplace(token, value);
    tokens_.emplace(value, token);
    max_id_ = std::max(max_id_, value);
  }
  const std::string unk = json_string_or_empty(model, "unk_token");
  if (!unk.empty()) {
    const auto found = vocab_.find(unk);
    if (found == vocab_.end()) throw InputError(fmt::format("{}: unk_token '{}' is not in the vocabulary", where, unk));
    unk_id_ = found->second;
  }
  byte_fallback_ = model.value("byte_fallback", false);
  fuse_unk_ = model.value("fuse_unk", false);
  ignore_merges_ = model.value("ignore_merges", false);
  continuing_subword_prefix_ = json_string_or_empty(model, "continuing_subword_prefix");
  end_of_word_suffix_ = json_string_or_empty(model, "end_of_word_suffix");

  // Merges come as "left right" strings (older files) or [left, right] pairs (tokenizers >= 0.20).
  int32_t rank = 0;
  for (const auto& entry : model.at("merges")) {
    std::string left, right;
    if (entry.is_string()) {
      const std::string text = entry.get<std::string>();
      const size_t space = text.find(' ', 1);
      if (space == std::string::npos) throw InputError(fmt::format("{}: merge {} is not 'left right'", where, rank));
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      left = entry.at(0).get<std::string>();
      right = entry.at(1).get<std::string>();
    }
    const auto l = vocab_.find(left), r = vocab_.find(right);
    std::string merged = left;
    if (!continuing_subword_prefix_.empty() && right.rfind(continuing_subword_prefix_, 0) == 0) {
      merged += right.substr(continuing_subword_prefix_.size());
    } else {
      merged += right;
    }
    const auto m = vocab_.find(merged);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      throw InputError(fmt::format("{}: merge {} ('{}' + '{}') names a token missing from the vocabulary", where, rank,
                                   left, right));
    }
    merges_.emplace(pair_key(l->second, r->second), std::make_pair(rank, static_cast<int32_t>(m->second)));
    ++rank;
  }
}

int64_t BpeModel::token_to_id(const std::string& token) const {
  const auto found = vocab_.find(token);
  return found == vocab_.end() ? -1 : found->second;
}

const std::string* BpeModel::id_to_token(int64_t id) const {
  const auto found = tokens_.find(id);
  return found == tokens_.end() ? nullptr : &found->second;
}

void BpeModel::encode(const std::string& piece, std::vector<int64_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const auto found = vocab_.find(piece);
    if (found != vocab_.end()) {
      ids.push_back(found->second);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto cached = cache_.find(piece);
    if (cached != cache_.end()) {
      ids.insert(ids.end(), cached->second.begin(), cached->second.end());
      return;
    }
  }
  std::vector<int64_t> result = merge(piece);
  ids.insert(ids.end(), result.begin(), result.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(piece, std::move(result));
}

std::vector<int64_t> BpeModel::merge(const std::string& piece) const {
  // Initial symbols: one per code point (with the subword prefix/suffix), or its bytes as <0xXX> tokens under
  // byte fallback, or the unknown token (consecutive unknowns fused when fuse_unk).
  struct Symbol {
    int64_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  const std::vector<std::string> chars = split_code_points(piece);
  for (size_t i = 0; i < chars.size(); ++i) {
    std::string token = chars[i];
    if (i > 0 && !continuing_subword_prefix_.empty()) token = continuing_subword_prefix_ + token;
    if (i + 1 == chars.size() && !end_of_word_suffix_.empty()) token += end_of_word_suffix_;
    const auto found = vocab_.find(token);
    if (found != vocab_.end()) {
      symbols.push_back({found->second, 0, 0, true});
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      std::vector<int64_t> byte_ids;
      for (unsigned char byte : chars[i]) {
        const auto byte_token = vocab_.find(fmt::format("<0x{:02X}>", byte));
        if (byte_token == vocab_.end()) {
          all_bytes = false;
          break;
        }
        byte_ids.push_back(byte_token->second);
      }
      if (all_bytes) {
        for (int64_t id : byte_ids) symbols.push_back({id, 0, 0, true});
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unknown token: the character is dropped, as the tokenizers library does
    if (fuse_unk_ && !symbols.empty() && symbols.back().id == unk_id_) continue;
    symbols.push_back({unk_id_, 0, 0, true});
  }
  const int count = static_cast<int>(symbols.size());
  for (int i = 0; i < count; ++i) {
    symbols[static_cast<size_t>(i)].prev = i - 1;
    symbols[static_cast<size_t>(i)].next = i + 1 < count ? i + 1 : -1;
  }

  // Lowest rank first, leftmost among equal ranks. Entries go stale when a neighbour merges; they are checked on
  // pop against the pair they were made for.
  struct Candidate {
    int32_t rank;
    int position;
    int64_t left, right;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int position) {
    if (position < 0) return;
    const Symbol& s = symbols[static_cast<size_t>(position)];
    if (s.next < 0) return;
    const int64_t right = symbols[static_cast<size_t>(s.next)].id;
    const auto found = merges_.find(pair_key(s.id, right));
    if (found != merges_.end()) queue.push({found->second.first, position, s.id, right});
  };
  for (int i = 0; i < count; ++i) push(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.position)];
    if (!left.alive || left.id != top.left || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    if (right.id != top.right) continue;
    left.id = merges_.at(pair_key(top.left, top.right)).second;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.position;
    push(left.prev);
    push(top.position);
  }
  std::vector<int64_t> ids;
  for (int i = count > 0 ? 0 : -1; i >= 0; i = symbols[static_cast<size_t>(i)].next) ids.push_back(symbols[static_cast<size_t>(i)].id);
  return ids;
}

}  // namespace tune::data::hf
