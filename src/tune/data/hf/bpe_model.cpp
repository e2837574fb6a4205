// Byte-pair encoding over a ranked merge table (see bpe_model.h).
#include "tune/data/hf/bpe_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <queue>

#include "tune/core/error.h"
#include "tune/data/hf/text_utils.h"
#include "tune/data/hf/token_ids.h"

namespace tune::data::hf {

template <class Value>
void FlatTable<Value>::reserve(size_t count) {
  size_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

template <class Value>
void FlatTable<Value>::insert(uint64_t key, Value value) {
  for (size_t slot = slot_of(key);; slot = (slot + 1) & mask_) {
    if (slots_[slot].key == key) return;
    if (slots_[slot].key == kEmpty) {
      slots_[slot] = {key, value};
      return;
    }
  }
}

template <class Value>
const Value* FlatTable<Value>::find(uint64_t key) const {
  if (slots_.empty()) return nullptr;
  for (size_t slot = slot_of(key);; slot = (slot + 1) & mask_) {
    if (slots_[slot].key == key) return &slots_[slot].value;
    if (slots_[slot].key == kEmpty) return nullptr;
  }
}

namespace {

constexpr size_t kCacheCapacity = 100000;
constexpr size_t kMaxCachedPiece = 256;

// 1 to 4 bytes packed with their count, so that "a" and "a\0" differ: the key of units_.
uint64_t unit_key(std::string_view unit) {
  uint64_t key = unit.size();
  for (size_t i = 0; i < unit.size(); ++i) {
    key |= static_cast<uint64_t>(static_cast<unsigned char>(unit[i])) << (8 * (i + 1));
  }
  return key;
}

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
    const int64_t value = token_id(id, fmt::format("{}: vocab entry '{}'", where, token));
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
  units_.reserve(vocab_.size());
  for (const auto& [token, id] : vocab_) {
    if (!token.empty() && token.size() <= 4) units_.insert(unit_key(token), id);
  }
  for (int byte = 0; byte < 256; ++byte) {
    const auto found = vocab_.find(fmt::format("<0x{:02X}>", byte));
    byte_tokens_[static_cast<size_t>(byte)] = found == vocab_.end() ? -1 : found->second;
  }

  // Merges come as "left right" strings (older files) or [left, right] pairs (tokenizers >= 0.20).
  int32_t rank = 0;
  merges_.reserve(model.at("merges").size());
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
    merges_.insert(pair_key(l->second, r->second), Merge{rank, static_cast<int32_t>(m->second)});
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
  const bool cacheable = piece.size() < kMaxCachedPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto cached = cache_.find(piece);
    if (cached != cache_.end()) {
      ids.insert(ids.end(), cached->second.begin(), cached->second.end());
      return;
    }
  }
  std::vector<int64_t> result = merge(piece);
  ids.insert(ids.end(), result.begin(), result.end());
  if (!cacheable) return;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(piece, std::move(result));
}

void BpeModel::push_unit(std::string_view unit, bool first, bool last, std::vector<Symbol>& symbols) const {
  if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    if (const int64_t* id = units_.find(unit_key(unit))) {
      symbols.push_back({*id, 0, 0, true});
      return;
    }
  } else {
    std::string token(unit);
    if (!first) token = continuing_subword_prefix_ + token;
    if (last) token += end_of_word_suffix_;
    const auto found = vocab_.find(token);
    if (found != vocab_.end()) {
      symbols.push_back({found->second, 0, 0, true});
      return;
    }
  }
  if (byte_fallback_) {
    const bool all_bytes = std::all_of(unit.begin(), unit.end(), [&](char byte) {
      return byte_tokens_[static_cast<unsigned char>(byte)] >= 0;
    });
    if (all_bytes) {
      for (unsigned char byte : unit) symbols.push_back({byte_tokens_[byte], 0, 0, true});
      return;
    }
  }
  if (unk_id_ < 0) return;  // no unknown token: the character is dropped, as the tokenizers library does
  if (fuse_unk_ && !symbols.empty() && symbols.back().id == unk_id_) return;
  symbols.push_back({unk_id_, 0, 0, true});
}

// One symbol per code point (with the subword prefix/suffix), or its bytes as <0xXX> tokens under byte fallback,
// or the unknown token (consecutive unknowns fused when fuse_unk); linked as a list for merging.
std::vector<BpeModel::Symbol> BpeModel::initial_symbols(std::string_view piece) const {
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    const size_t length = std::min<size_t>(sequence_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    push_unit(piece.substr(i, length), i == 0, i + length == piece.size(), symbols);
    i += length;
  }
  const int count = static_cast<int>(symbols.size());
  for (int i = 0; i < count; ++i) {
    symbols[static_cast<size_t>(i)].prev = i - 1;
    symbols[static_cast<size_t>(i)].next = i + 1 < count ? i + 1 : -1;
  }
  return symbols;
}

std::vector<int64_t> BpeModel::merge(const std::string& piece) const {
  std::vector<Symbol> symbols = initial_symbols(piece);
  const int count = static_cast<int>(symbols.size());

  // Lowest rank first, leftmost among equal ranks. Entries go stale when a neighbour merges; they are checked on
  // pop against the pair they were made for.
  struct Candidate {
    int32_t rank;
    int position;
    int64_t left, right;
    int32_t merged;
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
    if (const Merge* found = merges_.find(pair_key(s.id, right))) {
      queue.push({found->rank, position, s.id, right, found->id});
    }
  };
  for (int i = 0; i < count; ++i) push(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.position)];
    if (!left.alive || left.id != top.left || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    if (right.id != top.right) continue;
    left.id = top.merged;
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
