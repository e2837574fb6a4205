// The BPE model of a tokenizer.json: vocabulary, ranked merges, and the options real tokenizers use (byte
// fallback, unknown token, ignore_merges, subword prefix/suffix). Turns one pre-tokenized piece into ids.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tune::data::hf {

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
  std::vector<int64_t> merge(const std::string& piece) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> tokens_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  int64_t unk_id_ = -1;
  int64_t max_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_, end_of_word_suffix_;

  // Pieces recur (words, whitespace runs): their ids are cached, bounded, as the tokenizers library does.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace tune::data::hf
