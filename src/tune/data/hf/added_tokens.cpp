// Added-token matching (see added_tokens.h).
#include "tune/data/hf/added_tokens.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/data/hf/token_ids.h"

namespace tune::data::hf {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

AddedTokens::AddedTokens(const nlohmann::json& added_tokens, const std::string& source) : trie_(1) {
  if (added_tokens.is_null()) return;
  for (const auto& entry : added_tokens) {
    AddedToken token{token_id(entry.at("id"), source + ": added_tokens"), entry.at("content").get<std::string>(),
                     entry.value("special", false), entry.value("lstrip", false), entry.value("rstrip", false)};
    if (token.content.empty()) throw InputError(fmt::format("{}: added token {} has empty content", source, token.id));
    // single_word and normalized=true matching (against the normalized text) are approximated: every added
    // token is matched in the raw text, which is what they do for the tokenizers tune is tested on.
    by_id_[token.id] = tokens_.size();
    max_id_ = std::max(max_id_, token.id);
    int node = 0;
    for (unsigned char c : token.content) {
      const auto found = trie_[static_cast<size_t>(node)].children.find(c);
      if (found != trie_[static_cast<size_t>(node)].children.end()) {
        node = found->second;
      } else {
        trie_.push_back({});
        const int child = static_cast<int>(trie_.size()) - 1;
        trie_[static_cast<size_t>(node)].children.emplace(c, child);
        node = child;
      }
    }
    trie_[static_cast<size_t>(node)].token = static_cast<int>(tokens_.size());
    tokens_.push_back(std::move(token));
  }
}

const AddedToken* AddedTokens::by_id(int64_t id) const {
  const auto found = by_id_.find(id);
  return found == by_id_.end() ? nullptr : &tokens_[found->second];
}

const AddedToken* AddedTokens::by_content(const std::string& content) const {
  int node = 0;
  for (unsigned char c : content) {
    const auto found = trie_[static_cast<size_t>(node)].children.find(c);
    if (found == trie_[static_cast<size_t>(node)].children.end()) return nullptr;
    node = found->second;
  }
  const int token = trie_[static_cast<size_t>(node)].token;
  return token < 0 ? nullptr : &tokens_[static_cast<size_t>(token)];
}

std::vector<Segment> AddedTokens::split(const std::string& text) const {
  std::vector<Segment> segments;
  size_t plain_begin = 0;  // start of the pending plain text
  size_t i = 0;
  auto push_plain = [&](size_t begin, size_t end) {
    if (end > begin) segments.push_back({begin, text.substr(begin, end - begin), -1});
  };
  while (i < text.size()) {
    // The longest token starting at i.
    int node = 0, matched = -1;
    size_t matched_end = i;
    for (size_t j = i; j < text.size(); ++j) {
      const auto found = trie_[static_cast<size_t>(node)].children.find(static_cast<unsigned char>(text[j]));
      if (found == trie_[static_cast<size_t>(node)].children.end()) break;
      node = found->second;
      if (trie_[static_cast<size_t>(node)].token >= 0) {
        matched = trie_[static_cast<size_t>(node)].token;
        matched_end = j + 1;
      }
    }
    if (matched < 0) {
      ++i;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<size_t>(matched)];
    size_t plain_end = i;
    if (token.lstrip) {
      while (plain_end > plain_begin && is_space(text[plain_end - 1])) --plain_end;
    }
    push_plain(plain_begin, plain_end);
    segments.push_back({i, std::string(), token.id});
    i = matched_end;
    if (token.rstrip) {
      while (i < text.size() && is_space(text[i])) ++i;
    }
    plain_begin = i;
  }
  push_plain(plain_begin, text.size());
  return segments;
}

}  // namespace tune::data::hf
