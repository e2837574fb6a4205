// Python string methods, written over code points where Python's behaviour depends on them.
#include "tune/jinja/python_strings.h"

#include <algorithm>
#include <cctype>

#include "tune/jinja/utf8.h"

namespace tune::jinja {

std::string python_strip(const std::string& text, const std::optional<std::string>& characters, StripSide side) {
  const std::vector<std::string> code_points = split_code_points(text);
  std::vector<std::string> strip_set;
  if (characters) strip_set = split_code_points(*characters);
  auto strippable = [&](const std::string& code_point) {
    if (!characters) return is_python_whitespace(code_point);
    return std::find(strip_set.begin(), strip_set.end(), code_point) != strip_set.end();
  };
  size_t begin = 0;
  size_t end = code_points.size();
  if (side != StripSide::right)
    while (begin < end && strippable(code_points[begin])) ++begin;
  if (side != StripSide::left)
    while (end > begin && strippable(code_points[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += code_points[i];
  return out;
}

namespace {

// Whitespace-separated words with their byte ranges, for split() and rsplit() without a separator.
struct Word {
  size_t begin, end;
};
std::vector<Word> whitespace_words(const std::string& text) {
  std::vector<Word> words;
  size_t offset = 0;
  bool in_word = false;
  for (const std::string& code_point : split_code_points(text)) {
    const bool space = is_python_whitespace(code_point);
    if (!space && !in_word) words.push_back({offset, offset});
    if (!space) words.back().end = offset + code_point.size();
    in_word = !space;
    offset += code_point.size();
  }
  return words;
}

}  // namespace

std::vector<std::string> python_split(const std::string& text, const std::optional<std::string>& separator,
                                      int64_t maxsplit) {
  std::vector<std::string> pieces;
  if (!separator) {
    const std::vector<Word> words = whitespace_words(text);
    for (size_t i = 0; i < words.size(); ++i) {
      if (maxsplit >= 0 && static_cast<int64_t>(i) == maxsplit) {
        // The last piece keeps everything after the split point, trailing whitespace included.
        pieces.push_back(text.substr(words[i].begin));
        return pieces;
      }
      pieces.push_back(text.substr(words[i].begin, words[i].end - words[i].begin));
    }
    return pieces;
  }
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(pieces.size()) < maxsplit) {
    const size_t found = text.find(*separator, start);
    if (found == std::string::npos) break;
    pieces.push_back(text.substr(start, found - start));
    start = found + separator->size();
  }
  pieces.push_back(text.substr(start));
  return pieces;
}

std::vector<std::string> python_rsplit(const std::string& text, const std::optional<std::string>& separator,
                                       int64_t maxsplit) {
  if (maxsplit < 0) return python_split(text, separator, maxsplit);
  std::vector<std::string> pieces;
  if (!separator) {
    const std::vector<Word> words = whitespace_words(text);
    size_t i = words.size();
    while (i > 0 && static_cast<int64_t>(pieces.size()) < maxsplit) {
      --i;
      pieces.insert(pieces.begin(), text.substr(words[i].begin, words[i].end - words[i].begin));
    }
    if (i > 0) pieces.insert(pieces.begin(), text.substr(0, words[i - 1].end));  // leading whitespace kept
    return pieces;
  }
  size_t end = text.size();
  while (static_cast<int64_t>(pieces.size()) < maxsplit) {
    if (end < separator->size()) break;
    const size_t found = text.rfind(*separator, end - separator->size());
    if (found == std::string::npos) break;
    pieces.insert(pieces.begin(), text.substr(found + separator->size(), end - found - separator->size()));
    end = found;
  }
  pieces.insert(pieces.begin(), text.substr(0, end));
  return pieces;
}

std::string python_replace(const std::string& text, const std::string& old, const std::string& replacement,
                           int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    int64_t done = 0;
    for (const std::string& code_point : split_code_points(text)) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      out += code_point;
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = text.find(old, start);
    if (found == std::string::npos) break;
    out += text.substr(start, found - start) + replacement;
    start = found + old.size();
    ++done;
  }
  return out + text.substr(start);
}

std::string python_upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::string python_lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string python_title(const std::string& text) {
  // A letter after a non-letter starts a word; every other letter is lowercased.
  std::string out = text;
  bool previous_cased = false;
  for (char& c : out) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalpha(byte)) {
      c = static_cast<char>(previous_cased ? std::tolower(byte) : std::toupper(byte));
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return out;
}

std::string python_capitalize(const std::string& text) {
  std::string out = python_lower(text);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

}  // namespace tune::jinja
