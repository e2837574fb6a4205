// tokenizer.json pre-tokenizers (see pre_tokenizer.h).
#include "tune/data/hf/pre_tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string_view>
#include <utility>

#include "tune/core/error.h"
#include "tune/data/hf/byte_level.h"
#include "tune/data/hf/regex.h"
#include "tune/data/hf/text_utils.h"

namespace tune::data::hf {
namespace {

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::removed;
  if (name == "Isolated") return Behavior::isolated;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  throw InputError(fmt::format("{}: unknown behavior '{}'", where, name));
}

// Splits `piece` at the given matches (sorted, non-overlapping) as the tokenizers library's split behaviours do.
// Segments are views into the piece; each part's text is built once (no intermediate copies per segment).
std::vector<Piece> split_at(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& found, Behavior behavior,
                            bool invert) {
  // Segments in order, each flagged as a match (after inversion) or not.
  const std::string_view text = piece.text;
  std::vector<std::pair<std::string_view, bool>> segments;
  segments.reserve(2 * found.size() + 1);
  size_t last = 0;
  for (const auto& [begin, end] : found) {
    if (begin > last) segments.emplace_back(text.substr(last, begin - last), invert);
    segments.emplace_back(text.substr(begin, end - begin), !invert);
    last = end;
  }
  if (last < text.size()) segments.emplace_back(text.substr(last), invert);

  std::vector<Piece> parts;
  parts.reserve(segments.size());
  auto start_part = [&](std::string_view segment) { parts.push_back({std::string(segment), false}); };
  switch (behavior) {
    case Behavior::removed:
      for (const auto& [segment, is_match] : segments) {
        if (!is_match) start_part(segment);
      }
      break;
    case Behavior::isolated:
      for (const auto& [segment, is_match] : segments) start_part(segment);
      break;
    case Behavior::merged_with_previous: {
      bool previous_was_match = false;
      for (const auto& [segment, is_match] : segments) {
        if (is_match && !parts.empty() && !previous_was_match) {
          parts.back().text += segment;
        } else {
          start_part(segment);
        }
        previous_was_match = is_match;
      }
      break;
    }
    case Behavior::merged_with_next: {
      bool previous_was_match = false;
      for (const auto& [segment, is_match] : segments) {
        if (!is_match && previous_was_match && !parts.empty()) {
          parts.back().text += segment;
        } else {
          start_part(segment);
        }
        previous_was_match = is_match;
      }
      break;
    }
    case Behavior::contiguous: {
      bool previous_was_match = false;
      for (const auto& [segment, is_match] : segments) {
        if (is_match && previous_was_match && !parts.empty()) {
          parts.back().text += segment;
        } else {
          start_part(segment);
        }
        previous_was_match = is_match;
      }
      break;
    }
  }
  // Only the first part, when not empty, can begin the input; empty parts are dropped.
  if (!parts.empty() && !parts.front().text.empty()) parts.front().at_start = piece.at_start;
  std::erase_if(parts, [](const Piece& part) { return part.text.empty(); });
  return parts;
}

// Applies `split` to every piece (which it may move from) and concatenates the results.
template <class Split>
std::vector<Piece> for_each_piece(std::vector<Piece> pieces, Split split) {
  if (pieces.size() == 1) return split(pieces.front());  // the common case: one piece per added-token segment
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (auto& piece : pieces) {
    auto parts = split(piece);
    for (auto& part : parts) out.push_back(std::move(part));
  }
  return out;
}

}  // namespace

PreTokenizer make_pre_tokenizer(const nlohmann::json& spec, const std::string& source) {
  if (spec.is_null()) return [](std::vector<Piece> pieces) { return pieces; };
  const std::string type = spec.at("type").get<std::string>();
  const std::string where = fmt::format("{}: pre_tokenizer {}", source, type);

  if (type == "Sequence") {
    std::vector<PreTokenizer> parts;
    for (const auto& part : spec.at("pretokenizers")) parts.push_back(make_pre_tokenizer(part, source));
    return [parts](std::vector<Piece> pieces) {
      for (const auto& part : parts) pieces = part(std::move(pieces));
      return pieces;
    };
  }
  if (type == "Split") {
    const auto& pattern = spec.at("pattern");
    const Behavior behavior = parse_behavior(spec.at("behavior").get<std::string>(), where);
    const bool invert = spec.value("invert", false);
    if (pattern.contains("String")) {
      const std::string literal = pattern["String"].get<std::string>();
      return [literal, behavior, invert](std::vector<Piece> pieces) {
        return for_each_piece(std::move(pieces), [&](const Piece& piece) {
          std::vector<std::pair<size_t, size_t>> found;
          for (size_t at = literal.empty() ? std::string::npos : piece.text.find(literal); at != std::string::npos;
               at = piece.text.find(literal, at + literal.size())) {
            found.emplace_back(at, at + literal.size());
          }
          return split_at(piece, found, behavior, invert);
        });
      };
    }
    const Regex regex(pattern.at("Regex").get<std::string>(), where);
    return [regex, behavior, invert](std::vector<Piece> pieces) {
      return for_each_piece(std::move(pieces), [&](const Piece& piece) {
        return split_at(piece, regex.find_all(piece.text), behavior, invert);
      });
    };
  }
  if (type == "ByteLevel") {
    const bool add_prefix_space = spec.value("add_prefix_space", true);
    const bool use_regex = spec.value("use_regex", true);
    const Regex gpt2(kGpt2Pattern, where);
    return [add_prefix_space, use_regex, gpt2](std::vector<Piece> pieces) {
      auto split = for_each_piece(std::move(pieces), [&](Piece& input) {
        Piece piece = std::move(input);
        if (add_prefix_space && piece.text.rfind(' ', 0) != 0) piece.text.insert(0, 1, ' ');
        if (!use_regex) {
          std::vector<Piece> whole;
          whole.push_back(std::move(piece));
          return whole;
        }
        return split_at(piece, gpt2.find_all(piece.text), Behavior::isolated, false);
      });
      for (auto& piece : split) piece.text = bytes_to_alphabet(piece.text);
      return split;
    };
  }
  if (type == "Metaspace") {
    const std::string replacement = spec.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = spec.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = spec.value("add_prefix_space", true) ? "always" : "never";
    const bool split = spec.value("split", true);
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw InputError(fmt::format("{}: prepend_scheme '{}' (expected always, first or never)", where, scheme));
    }
    return [replacement, scheme, split](std::vector<Piece> pieces) {
      return for_each_piece(std::move(pieces), [&](const Piece& input) {
        Piece piece{replace_all(input.text, " ", replacement), input.at_start};
        const bool prepend = scheme == "always" || (scheme == "first" && input.at_start);
        if (prepend && piece.text.rfind(replacement, 0) != 0) piece.text = replacement + piece.text;
        if (!split) return std::vector<Piece>{piece};
        std::vector<std::pair<size_t, size_t>> found;
        for (size_t at = piece.text.find(replacement); at != std::string::npos;
             at = piece.text.find(replacement, at + replacement.size())) {
          found.emplace_back(at, at + replacement.size());
        }
        return split_at(piece, found, Behavior::merged_with_next, false);
      });
    };
  }
  if (type == "Digits") {
    const bool individual = spec.value("individual_digits", false);
    const Regex digits(individual ? R"(\p{N})" : R"(\p{N}+)", where);
    return [digits](std::vector<Piece> pieces) {
      return for_each_piece(std::move(pieces), [&](const Piece& piece) {
        return split_at(piece, digits.find_all(piece.text), Behavior::isolated, false);
      });
    };
  }
  if (type == "Whitespace" || type == "WhitespaceSplit") {
    const Regex words(type == "Whitespace" ? R"(\w+|[^\w\s]+)" : R"(\S+)", where);
    return [words](std::vector<Piece> pieces) {
      return for_each_piece(std::move(pieces), [&](const Piece& piece) {
        return split_at(piece, words.find_all(piece.text), Behavior::removed, true);
      });
    };
  }
  if (type == "Punctuation") {
    const Behavior behavior = parse_behavior(spec.value("behavior", std::string("Isolated")), where);
    const Regex punctuation(R"([\p{P}\p{S}])", where);  // Unicode punctuation, as is_punctuation in tokenizers
    return [punctuation, behavior](std::vector<Piece> pieces) {
      return for_each_piece(std::move(pieces), [&](const Piece& piece) {
        return split_at(piece, punctuation.find_all(piece.text), behavior, false);
      });
    };
  }
  throw InputError(fmt::format("{}: pre_tokenizer type '{}' is not supported (supported: Sequence, Split, ByteLevel, "
                               "Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation)",
                               source, type));
}

}  // namespace tune::data::hf
