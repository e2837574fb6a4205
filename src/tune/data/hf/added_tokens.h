// The added tokens of a tokenizer.json (special tokens such as <|eot_id|>, and user-added words): found in the raw
// text before normalization, leftmost-longest, and never split by the model.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace tune::data::hf {

struct AddedToken {
  int64_t id;
  std::string content;
  bool special, lstrip, rstrip;
};

// A stretch of the input: either plain text for the pipeline or one added token.
struct Segment {
  size_t begin;           // byte offset in the input (0: the start, for Metaspace's prepend_scheme "first")
  std::string text;       // plain text (empty for a token)
  int64_t token_id = -1;  // >= 0: an added token
};

class AddedTokens {
 public:
  AddedTokens(const nlohmann::json& added_tokens, const std::string& source);
  std::vector<Segment> split(const std::string& text) const;
  const AddedToken* by_id(int64_t id) const;
  const AddedToken* by_content(const std::string& content) const;
  int64_t max_id() const { return max_id_; }

 private:
  // A byte trie over the tokens' contents for leftmost-longest matching in one pass.
  struct Node {
    std::unordered_map<unsigned char, int> children;
    int token = -1;  // index into tokens_
  };
  std::vector<Node> trie_;
  std::vector<AddedToken> tokens_;
  std::unordered_map<int64_t, size_t> by_id_;
  int64_t max_id_ = -1;
};

}  // namespace tune::data::hf
