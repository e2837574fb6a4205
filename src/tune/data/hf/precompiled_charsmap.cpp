// The Precompiled normalizer (see precompiled_charsmap.h).
#include "tune/data/hf/precompiled_charsmap.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <cstring>

#include "tune/core/error.h"

namespace tune::data::hf {
namespace {

// darts-clone's double-array unit layout.
bool has_leaf(uint32_t unit) { return ((unit >> 8) & 1U) == 1U; }
uint32_t value(uint32_t unit) { return unit & ((1U << 31) - 1U); }
uint32_t label(uint32_t unit) { return unit & ((1U << 31) | 0xFFU); }
uint32_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1U << 9)) >> 6); }

// Clusters shorter than this are replaced whole when a prefix of theirs is mapped (the `tokenizers` rule).
constexpr size_t kWholeClusterBytes = 6;

}  // namespace

PrecompiledCharsMap::PrecompiledCharsMap(std::string_view blob, const std::string& source) {
  if (blob.empty()) return;
  uint32_t trie_bytes = 0;
  if (blob.size() < sizeof(trie_bytes)) {
    throw InputError(fmt::format("{}: the normalization map (precompiled_charsmap) is {} bytes, too short to hold its "
                                 "trie's size", source, blob.size()));
  }
  std::memcpy(&trie_bytes, blob.data(), sizeof(trie_bytes));  // little-endian, as x86 and ARM hosts are
  if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > blob.size() - sizeof(trie_bytes)) {
    throw InputError(fmt::format("{}: the normalization map (precompiled_charsmap) declares a {}-byte trie in {} bytes",
                                 source, trie_bytes, blob.size()));
  }
  trie_.resize(trie_bytes / 4);
  std::memcpy(trie_.data(), blob.data() + sizeof(trie_bytes), trie_bytes);
  replacements_.assign(blob.substr(sizeof(trie_bytes) + trie_bytes));
}

std::optional<std::string_view> PrecompiledCharsMap::shortest_prefix_replacement(std::string_view chunk) const {
  if (trie_.empty()) return std::nullopt;
  size_t node = offset(trie_[0]);
  for (const char byte : chunk) {
    const auto c = static_cast<unsigned char>(byte);
    if (c == 0) break;  // the trie's keys are C strings
    node ^= c;
    if (node >= trie_.size()) return std::nullopt;
    const uint32_t unit = trie_[node];
    if (label(unit) != c) return std::nullopt;
    node ^= offset(unit);
    if (node >= trie_.size()) return std::nullopt;
    if (has_leaf(unit)) {
      const size_t begin = value(trie_[node]);
      if (begin >= replacements_.size()) return std::nullopt;  // a corrupt index maps nothing rather than reading past
      const size_t end = replacements_.find('\0', begin);
      return std::string_view(replacements_).substr(begin, (end == std::string::npos ? replacements_.size() : end) -
                                                               begin);
    }
  }
  return std::nullopt;
}

std::string PrecompiledCharsMap::normalize(std::string_view text) const {
  if (trie_.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  auto map_characters = [&](std::string_view cluster) {
    for (size_t at = 0; at < cluster.size();) {
      utf8proc_int32_t code_point = 0;
      const auto read = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(cluster.data() + at),
                                         static_cast<utf8proc_ssize_t>(cluster.size() - at), &code_point);
      const size_t length = read > 0 ? static_cast<size_t>(read) : 1;
      const std::string_view character = cluster.substr(at, length);
      const auto replacement = shortest_prefix_replacement(character);
      out += replacement ? *replacement : character;
      at += length;
    }
  };
  auto map_cluster = [&](std::string_view cluster) {
    if (cluster.empty()) return;
    if (cluster.size() < kWholeClusterBytes) {
      if (const auto replacement = shortest_prefix_replacement(cluster)) {
        out += *replacement;
        return;
      }
    }
    map_characters(cluster);
  };

  size_t cluster_begin = 0;
  utf8proc_int32_t previous = -1;  // -1: no previous code point, or an invalid byte (a break on both sides)
  utf8proc_int32_t state = 0;
  for (size_t at = 0; at < text.size();) {
    utf8proc_int32_t code_point = 0;
    const auto read = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                       static_cast<utf8proc_ssize_t>(text.size() - at), &code_point);
    const bool valid = read > 0;
    const bool breaks = previous < 0 || !valid || utf8proc_grapheme_break_stateful(previous, code_point, &state);
    if (breaks) {
      map_cluster(text.substr(cluster_begin, at - cluster_begin));
      cluster_begin = at;
      if (!valid) state = 0;
    }
    previous = valid ? code_point : -1;
    at += valid ? static_cast<size_t>(read) : 1;
  }
  map_cluster(text.substr(cluster_begin));
  return out;
}

}  // namespace tune::data::hf
