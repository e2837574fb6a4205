// Splits template source into text and the tokens inside {{ ... }} and {% ... %}, applying the whitespace rules
// transformers configures: trim_blocks (drop the newline after a block tag), lstrip_blocks (drop the indentation
// before a block tag), `-` to strip all whitespace on that side and `+` to keep it. Comments are dropped here.
#pragma once

#include <string>
#include <vector>

namespace tune::jinja {

struct Location {
  int line = 1;
  int column = 1;
};

enum class TokenKind {
  text,            // template data between tags, already whitespace-controlled
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,
  integer,
  floating,
  string,  // the literal's value, escapes already decoded
  symbol,  // an operator or punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } . , : |
  end_of_input,
};

struct Token {
  TokenKind kind;
  std::string text;
  Location location;
};

// Throws tune::InputError naming `template_name`, the line and the column for an unterminated tag, comment or
// string, or a character that starts no token.
std::vector<Token> tokenize(const std::string& source, const std::string& template_name);

// "template 'NAME', line L, column C: MESSAGE": the form of every error about a template.
std::string located_message(const std::string& template_name, Location location, const std::string& message);

}  // namespace tune::jinja
