// The BPE model of a tokenizer.json: vocabulary, ranked merges, and the options real tokenizers use (byte
// fallback, unknown token, ignore_merges, subword prefix/suffix). Turns one pre-tokenized piece into ids.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tune::data::hf {

// A hash table from 64-bit keys to small values with open addressing (linear probing, power-of-two capacity, at
// most half full). BPE looks a pair up for every candidate merge: here that is one multiply and usually one cache
// line, where std::unordered_map takes a modulo by a prime and a pointer chase per node.
template <class Value>
class FlatTable {
 public:
  // Sized once, before any insert, for `count` keys; insert() keeps the first value of a repeated key (as
  // unordered_map::emplace).
  void reserve(size_t count);
  void insert(uint64_t key, Value value);
  const Value* find(uint64_t key) const;

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no key BPE makes has every bit set
  struct Slot {
    uint64_t key = kEmpty;
    Value value{};
  };
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
};

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object (type BPE); `source` names the file for errors.
  BpeModel(const nlohmann::json& model, const std::string& source);

  // Appends the ids of one piece (already in the vocabulary's alphabet: byte-level characters, or "▁" words).
  void encode(const std::string& piece, std::vector<int64_t>& ids) const;

  int64_t token_to_id(const std::string& token) const;  // -1 when absent
  const std::string* id_to_token(int64_t id) const;     // nullptr when absent
  int64_t max_id() const { return max_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  struct Symbol {
    int64_t id;
    int prev, next;
    bool alive;
  };

  std::vector<int64_t> merge(const std::string& piece) const;
  std::vector<Symbol> initial_symbols(std::string_view piece) const;
  // Appends the symbols of one code point (its UTF-8 bytes `unit`); `first`/`last`: its place in the piece.
  void push_unit(std::string_view unit, bool first, bool last, std::vector<Symbol>& symbols) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> tokens_;
  // (left id << 32 | right id) -> (rank, merged id)
  FlatTable<Merge> merges_;
  // Every vocabulary token of 1 to 4 bytes (packed as unit_key does) -> id: the initial symbols of a piece are its
  // code points, looked up here without building a std::string per code point.
  FlatTable<int64_t> units_;
  std::array<int64_t, 256> byte_tokens_{};  // byte -> id of its <0xXX> token, -1 when absent (byte fallback)
  int64_t unk_id_ = -1;
  int64_t max_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_, end_of_word_suffix_;

  // Pieces recur (words, whitespace runs): their ids are cached, bounded, as the tokenizers library does. Only
  // pieces shorter than kMaxCachedPiece bytes (tokenizers' MAX_LENGTH): tokenizers without a pre-tokenizer (Llama
  // 2, Gemma) make whole documents pieces, which do not recur and would fill the memory.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace tune::data::hf
