// The template lexer: one pass over the source, text outside tags and expression tokens inside them.
#include "tune/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include <fmt/format.h>

#include "tune/core/error.h"

namespace tune::jinja {
namespace {

bool is_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// jinja2 turns every \r\n and \r into \n and, without keep_trailing_newline, drops one final newline.
std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

constexpr const char* kTwoCharSymbols[] = {"//", "**", "==", "!=", "<=", ">="};
constexpr const char* kOneCharSymbols = "+-*/%~<>=()[]{}.,:|";

class Lexer {
 public:
  Lexer(std::string source, std::string template_name)
      : source_(std::move(source)), template_name_(std::move(template_name)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source_.size(); ++i)
      if (source_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (position_ < source_.size()) {
      const size_t tag = find_tag(position_);
      std::string text = source_.substr(position_, tag - position_);
      if (tag == source_.size()) {
        emit_text(std::move(text), position_);
        break;
      }
      const char kind = source_[tag + 1];  // '{', '%' or '#'
      const char modifier = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && is_whitespace(text.back())) text.pop_back();
      } else if (kind != '{' && modifier != '+') {
        strip_indentation_before(tag, text);
      }
      emit_text(std::move(text), position_);
      position_ = tag + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      if (kind == '#') {
        skip_comment(tag);
      } else {
        lex_tag(kind == '{', tag);
      }
    }
    tokens_.push_back({TokenKind::end_of_input, "", location_of(source_.size())});
    return std::move(tokens_);
  }

  Location location_of(size_t offset) const {
    const auto next_line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_start = *(next_line - 1);
    // Tokens come in order, so the column is counted on from the previous token's when it is on the same line:
    // counting from the line's start every time made a long one-line template quadratic (minutes for 100 KB).
    size_t from = line_start;
    int column = 1;
    if (counted_offset_ >= line_start && counted_offset_ <= offset) {
      from = counted_offset_;
      column = counted_column_;
    }
    for (size_t i = from; i < offset && i < source_.size(); ++i)
      if ((static_cast<unsigned char>(source_[i]) & 0xC0) != 0x80) ++column;  // count code points, not bytes
    counted_offset_ = offset;
    counted_column_ = column;
    return {static_cast<int>(next_line - line_starts_.begin()), column};
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    throw InputError(located_message(template_name_, location_of(offset), message));
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < source_.size(); ++i) {
      if (source_[i] == '{' && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) return i;
    }
    return source_.size();
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({TokenKind::text, std::move(text), location_of(offset)});
  }

  // lstrip_blocks: spaces and tabs between the start of the line and a block tag or comment are not output.
  void strip_indentation_before(size_t tag, std::string& text) const {
    size_t start = tag;
    while (start > 0 && (source_[start - 1] == ' ' || source_[start - 1] == '\t')) --start;
    if (start != 0 && source_[start - 1] != '\n') return;
    text.resize(text.size() - std::min(text.size(), tag - start));
  }

  // After a tag's closing delimiter: `-` strips all whitespace, `+` keeps it, and otherwise trim_blocks drops
  // one newline after block tags and comments.
  void apply_end_modifier(char modifier, bool trim_newline) {
    if (modifier == '-') {
      while (position_ < source_.size() && is_whitespace(source_[position_])) ++position_;
    } else if (modifier != '+' && trim_newline && position_ < source_.size() && source_[position_] == '\n') {
      ++position_;
    }
  }

  void skip_comment(size_t tag) {
    const size_t end = source_.find("#}", position_);
    if (end == std::string::npos) fail(tag, "unterminated comment, expected '#}'");
    const char modifier = end > position_ ? source_[end - 1] : '\0';
    position_ = end + 2;
    apply_end_modifier(modifier == '-' || modifier == '+' ? modifier : '\0', true);
  }

  // Expression tokens up to the tag's end; braces inside (dict literals) are counted so `}}` in `{'a': {}}}`
  // closes only at depth zero.
  void lex_tag(bool is_variable, size_t tag) {
    tokens_.push_back({is_variable ? TokenKind::variable_begin : TokenKind::block_begin, "", location_of(tag)});
    int depth = 0;
    while (true) {
      while (position_ < source_.size() && is_whitespace(source_[position_])) ++position_;
      if (position_ >= source_.size()) fail(tag, fmt::format("unexpected end of template, expected '{}'",
                                                              is_variable ? "}}" : "%}"));
      if (depth == 0 && lex_tag_end(is_variable)) return;
      const char c = source_[position_];
      const size_t start = position_;
      if (is_name_start(c)) {
        while (position_ < source_.size() && is_name_char(source_[position_])) ++position_;
        tokens_.push_back({TokenKind::name, source_.substr(start, position_ - start), location_of(start)});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_symbol(depth);
      }
    }
  }

  bool lex_tag_end(bool is_variable) {
    const char* close = is_variable ? "}}" : "%}";
    char modifier = '\0';
    size_t at = position_;
    if (source_[at] == '-' || (!is_variable && source_[at] == '+')) modifier = source_[at++];
    if (source_.compare(at, 2, close) != 0) return false;
    tokens_.push_back({is_variable ? TokenKind::variable_end : TokenKind::block_end, "", location_of(position_)});
    position_ = at + 2;
    apply_end_modifier(modifier, !is_variable);
    return true;
  }

  void lex_number() {
    const size_t start = position_;
    auto digits = [&] {
      while (position_ < source_.size() && (std::isdigit(static_cast<unsigned char>(source_[position_])) ||
                                            source_[position_] == '_'))
        ++position_;
    };
    digits();
    bool is_float = false;
    if (position_ + 1 < source_.size() && source_[position_] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[position_ + 1]))) {
      is_float = true;
      ++position_;
      digits();
    }
    if (position_ < source_.size() && (source_[position_] == 'e' || source_[position_] == 'E')) {
      size_t exponent = position_ + 1;
      if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-')) ++exponent;
      if (exponent < source_.size() && std::isdigit(static_cast<unsigned char>(source_[exponent]))) {
        is_float = true;
        position_ = exponent;
        digits();
      }
    }
    std::string text = source_.substr(start, position_ - start);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({is_float ? TokenKind::floating : TokenKind::integer, std::move(text), location_of(start)});
  }

  // Python's string escapes, as jinja2 decodes them; an unknown escape keeps its backslash.
  void lex_string() {
    const size_t start = position_;
    const char quote = source_[position_++];
    std::string value;
    while (true) {
      if (position_ >= source_.size()) fail(start, "unterminated string literal");
      const char c = source_[position_++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (position_ >= source_.size()) fail(start, "unterminated string literal");
      const char escape = source_[position_++];
      switch (escape) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
          uint32_t code = static_cast<uint32_t>(escape - '0');
          for (int i = 0; i < 2 && position_ < source_.size() && source_[position_] >= '0' &&
                          source_[position_] <= '7';
               ++i)
            code = code * 8 + static_cast<uint32_t>(source_[position_++] - '0');
          append_utf8(value, code);
          break;
        }
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\\': case '\'': case '"': value += escape; break;
        case '\n': break;  // a backslash before a newline continues the line
        case 'x': append_utf8(value, hex_escape(start, 2)); break;
        case 'u': append_utf8(value, hex_escape(start, 4)); break;
        case 'U': append_utf8(value, hex_escape(start, 8)); break;
        default:
          value += '\\';
          value += escape;
      }
    }
    // Adjacent literals concatenate, as in Python: 'a' "b" is "ab".
    if (!tokens_.empty() && tokens_.back().kind == TokenKind::string && adjacent_string_offset_ == start) {
      tokens_.back().text += value;
    } else {
      tokens_.push_back({TokenKind::string, std::move(value), location_of(start)});
    }
    adjacent_string_offset_ = position_;
    while (adjacent_string_offset_ < source_.size() && is_whitespace(source_[adjacent_string_offset_]))
      ++adjacent_string_offset_;
  }

  uint32_t hex_escape(size_t string_start, int digits) {
    uint32_t code = 0;
    for (int i = 0; i < digits; ++i) {
      if (position_ >= source_.size() || !std::isxdigit(static_cast<unsigned char>(source_[position_])))
        fail(string_start, "truncated \\x, \\u or \\U escape in string literal");
      code = code * 16 + static_cast<uint32_t>(std::stoi(std::string(1, source_[position_++]), nullptr, 16));
    }
    return code;
  }

  void lex_symbol(int& depth) {
    const size_t start = position_;
    for (const char* symbol : kTwoCharSymbols) {
      if (source_.compare(position_, 2, symbol) == 0) {
        position_ += 2;
        tokens_.push_back({TokenKind::symbol, symbol, location_of(start)});
        return;
      }
    }
    const char c = source_[position_];
    if (std::strchr(kOneCharSymbols, c) == nullptr) fail(start, fmt::format("unexpected character '{}'", c));
    if (c == '{' || c == '[' || c == '(') ++depth;
    if ((c == '}' || c == ']' || c == ')') && depth > 0) --depth;
    ++position_;
    tokens_.push_back({TokenKind::symbol, std::string(1, c), location_of(start)});
  }

  std::string source_;
  std::string template_name_;
  std::vector<size_t> line_starts_;
  size_t position_ = 0;
  size_t adjacent_string_offset_ = std::string::npos;
  mutable size_t counted_offset_ = 0;  // location_of's last offset and its column
  mutable int counted_column_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::string located_message(const std::string& template_name, Location location, const std::string& message) {
  return fmt::format("template '{}', line {}, column {}: {}", template_name, location.line, location.column,
                     message);
}

std::vector<Token> tokenize(const std::string& source, const std::string& template_name) {
  return Lexer(normalize_newlines(source), template_name).run();
}

}  // namespace tune::jinja
