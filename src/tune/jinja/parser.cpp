// Recursive descent over the token stream, following jinja2's operator precedence (loosest first):
// `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then filters `|f`,
// tests `is t` and postfix `.a [i] (args)`.
#include "tune/jinja/parser.h"

#include <initializer_list>

#include <fmt/format.h>

#include "tune/core/error.h"

namespace tune::jinja {
namespace {

template <typename Node>
ExpressionPtr make_expression(Location location, Node node) {
  return std::make_unique<Expression>(Expression{location, std::move(node)});
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::text:
      return "template text";
    case TokenKind::variable_begin:
      return "'{{'";
    case TokenKind::variable_end:
      return "'}}'";
    case TokenKind::block_begin:
      return "'{%'";
    case TokenKind::block_end:
      return "'%}'";
    case TokenKind::string:
      return "a string";
    case TokenKind::end_of_input:
      return "end of template";
    default:
      return "'" + token.text + "'";
  }
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, std::string template_name)
      : tokens_(tokens), template_name_(std::move(template_name)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (current().kind != TokenKind::end_of_input) {
      fail(current(), fmt::format("unexpected tag '{}': no block is open that it could close", current().text));
    }
    return body;
  }

 private:
  // ---- token access ----
  const Token& current() const { return tokens_[index_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(index_ + ahead, tokens_.size() - 1)]; }
  const Token& advance() { return tokens_[index_ < tokens_.size() - 1 ? index_++ : index_]; }

  bool at_symbol(const char* symbol) const {
    return current().kind == TokenKind::symbol && current().text == symbol;
  }
  bool at_name(const char* name) const { return current().kind == TokenKind::name && current().text == name; }
  bool accept_symbol(const char* symbol) {
    if (!at_symbol(symbol)) return false;
    advance();
    return true;
  }
  bool accept_name(const char* name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    throw InputError(located_message(template_name_, at.location, message));
  }

  // Nesting is recursion, here and in the renderer: blocks in blocks, brackets, unary operators, and chains of
  // operators, filters, calls and subscripts (each link nests the tree one level deeper). jinja2 gives up near 100
  // levels (RecursionError); tune allows kMaxNesting, then fails naming the place rather than overflow the stack.
  static constexpr int kMaxNesting = 256;

  // Levels of nesting_ held until the end of the scope it lives in.
  class Nesting {
   public:
    explicit Nesting(Parser& parser) : parser_(parser) {}
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    ~Nesting() { parser_.nesting_ -= levels_; }
    void enter(const Token& at) {
      if (parser_.nesting_ >= kMaxNesting) {
        parser_.fail(at, fmt::format("the template nests more than {} levels deep here", kMaxNesting));
      }
      ++parser_.nesting_;
      ++levels_;
    }

   private:
    Parser& parser_;
    int levels_ = 0;
  };
  void expect_symbol(const char* symbol) {
    if (!accept_symbol(symbol)) fail(current(), fmt::format("expected '{}', got {}", symbol, describe(current())));
  }
  void expect_name(const char* name) {
    if (!accept_name(name)) fail(current(), fmt::format("expected '{}', got {}", name, describe(current())));
  }
  std::string expect_identifier(const char* what) {
    if (current().kind != TokenKind::name) fail(current(), fmt::format("expected {}, got {}", what, describe(current())));
    return advance().text;
  }
  void expect_block_end() {
    if (current().kind != TokenKind::block_end) {
      fail(current(), fmt::format("expected end of statement '%}}', got {}", describe(current())));
    }
    advance();
  }

  // ---- statements ----

  // Statements up to a `{% tag %}` whose tag is in stop_tags; returns positioned on that tag's name.
  Body parse_body(std::initializer_list<const char*> stop_tags) {
    Body body;
    while (current().kind != TokenKind::end_of_input) {
      const Token& token = current();
      if (token.kind == TokenKind::text) {
        body.push_back({token.location, TextOutput{token.text}});
        advance();
      } else if (token.kind == TokenKind::variable_begin) {
        advance();
        ExpressionPtr expression = parse_tuple(true);
        if (current().kind != TokenKind::variable_end) {
          fail(current(), fmt::format("expected end of print statement '}}}}', got {}", describe(current())));
        }
        advance();
        body.push_back({token.location, ExpressionOutput{std::move(expression)}});
      } else {  // block_begin
        const Token& tag = peek();
        if (tag.kind == TokenKind::name) {
          for (const char* stop : stop_tags) {
            if (tag.text == stop) {
              advance();
              return body;
            }
          }
        }
        advance();
        body.push_back(parse_statement(token.location));
      }
    }
    if (stop_tags.size() != 0) {
      std::string wanted;
      for (const char* stop : stop_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(stop) + "'";
      fail(current(), fmt::format("unexpected end of template, expected {}", wanted));
    }
    return body;
  }

  Statement parse_statement(Location location) {
    const Token& tag = current();
    Nesting nesting(*this);
    nesting.enter(tag);
    if (tag.kind != TokenKind::name) fail(tag, fmt::format("expected a tag name, got {}", describe(tag)));
    const std::string name = advance().text;
    if (name == "if") return {location, parse_if()};
    if (name == "for") return {location, parse_for()};
    if (name == "set") return {location, parse_set()};
    if (name == "macro") return {location, parse_macro()};
    if (name == "break" || name == "continue") {
      expect_block_end();
      if (name == "break") return {location, BreakStatement{}};
      return {location, ContinueStatement{}};
    }
    if (name == "generation") {
      expect_block_end();
      GenerationBlock block{parse_body({"endgeneration"})};
      end_tag();
      return {location, std::move(block)};
    }
    static const char* const kClosing[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration"};
    for (const char* closing : kClosing) {
      if (name == closing) fail(tag, fmt::format("unexpected tag '{}': no block is open that it could close", name));
    }
    static const char* const kUnsupported[] = {"include", "import", "from", "extends", "block", "call",
                                               "filter",  "with",   "raw",  "autoescape", "do"};
    for (const char* unsupported : kUnsupported) {
      if (name == unsupported) fail(tag, fmt::format("the '{}' tag is not supported by tune's chat template "
                                                     "interpreter", name));
    }
    fail(tag, fmt::format("unknown tag '{}' (expected if, for, set, macro, break, continue or generation)", name));
  }

  // Consumes the closing tag's name (already checked by parse_body) and its `%}`.
  void end_tag() {
    advance();
    expect_block_end();
  }

  IfStatement parse_if() {
    IfStatement statement;
    ExpressionPtr condition = parse_tuple(true);
    expect_block_end();
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      statement.branches.emplace_back(std::move(condition), std::move(body));
      const std::string tag = advance().text;
      if (tag == "elif") {
        condition = parse_tuple(true);
        expect_block_end();
        continue;
      }
      if (tag == "else") {
        expect_block_end();
        statement.otherwise = parse_body({"endif"});
        end_tag();
      } else {
        expect_block_end();
      }
      return statement;
    }
  }

  ForStatement parse_for() {
    ForStatement statement;
    statement.targets = parse_target_names();
    expect_name("in");
    statement.iterable = parse_tuple(false);  // without `x if c`, so a trailing `if` is the loop filter
    if (accept_name("if")) statement.filter = parse_expression(true);
    if (at_name("recursive")) fail(current(), "recursive loops are not supported by tune's chat template interpreter");
    expect_block_end();
    statement.body = parse_body({"endfor", "else"});
    if (advance().text == "else") {
      expect_block_end();
      statement.otherwise = parse_body({"endfor"});
      end_tag();
    } else {
      expect_block_end();
    }
    return statement;
  }

  std::vector<std::string> parse_target_names() {
    std::vector<std::string> names;
    const bool parenthesized = accept_symbol("(");
    do {
      names.push_back(expect_identifier("a variable name"));
    } while (accept_symbol(","));
    if (parenthesized) expect_symbol(")");
    return names;
  }

  SetStatement parse_set() {
    SetStatement statement;
    if (current().kind == TokenKind::name && peek().kind == TokenKind::symbol && peek().text == ".") {
      statement.targets.push_back(advance().text);
      advance();
      statement.attribute = expect_identifier("an attribute name");
    } else {
      statement.targets = parse_target_names();
    }
    if (current().kind == TokenKind::block_end) {
      if (!statement.attribute.empty() || statement.targets.size() != 1) {
        fail(current(), "a block set `{% set name %}...{% endset %}` takes a single variable name");
      }
      advance();
      statement.body = parse_body({"endset"});
      end_tag();
      return statement;
    }
    expect_symbol("=");
    statement.value = parse_tuple(true);
    expect_block_end();
    return statement;
  }

  MacroStatement parse_macro() {
    MacroStatement statement;
    statement.name = expect_identifier("a macro name");
    expect_symbol("(");
    while (!accept_symbol(")")) {
      if (!statement.parameters.empty()) expect_symbol(",");
      std::string parameter = expect_identifier("a parameter name");
      ExpressionPtr default_value = accept_symbol("=") ? parse_expression(true) : nullptr;
      statement.parameters.emplace_back(std::move(parameter), std::move(default_value));
    }
    expect_block_end();
    statement.body = parse_body({"endmacro"});
    end_tag();
    return statement;
  }

  // ---- expressions ----

  // `a, b` makes a tuple where jinja2 allows one: in {{ }}, after `set x =`, after `for ... in`.
  ExpressionPtr parse_tuple(bool with_conditional) {
    const Location location = current().location;
    ExpressionPtr first = parse_expression(with_conditional);
    if (!at_symbol(",")) return first;
    ListLiteral items{{}, true};
    items.items.push_back(std::move(first));
    while (accept_symbol(",")) {
      if (at_expression_end()) break;
      items.items.push_back(parse_expression(with_conditional));
    }
    return make_expression(location, std::move(items));
  }

  bool at_expression_end() const {
    const TokenKind kind = current().kind;
    return kind == TokenKind::block_end || kind == TokenKind::variable_end || at_symbol(")") || at_symbol("]") ||
           at_symbol("=");
  }

  ExpressionPtr parse_expression(bool with_conditional) {
    Nesting nesting(*this);
    nesting.enter(current());
    if (!with_conditional) return parse_or();
    const Location location = current().location;
    ExpressionPtr expression = parse_or();
    while (at_name("if")) {
      nesting.enter(advance());
      ExpressionPtr condition = parse_or();
      ExpressionPtr otherwise = accept_name("else") ? parse_expression(true) : nullptr;
      expression = make_expression(location, Conditional{std::move(condition), std::move(expression),
                                                         std::move(otherwise)});
    }
    return expression;
  }

  ExpressionPtr binary(Location location, BinaryOperator op, ExpressionPtr left, ExpressionPtr right) {
    return make_expression(location, Binary{op, std::move(left), std::move(right)});
  }

  ExpressionPtr parse_or() {
    Nesting chain(*this);
    ExpressionPtr left = parse_and();
    while (at_name("or")) {
      chain.enter(current());
      const Location location = advance().location;
      left = binary(location, BinaryOperator::logical_or, std::move(left), parse_and());
    }
    return left;
  }

  ExpressionPtr parse_and() {
    Nesting chain(*this);
    ExpressionPtr left = parse_not();
    while (at_name("and")) {
      chain.enter(current());
      const Location location = advance().location;
      left = binary(location, BinaryOperator::logical_and, std::move(left), parse_not());
    }
    return left;
  }

  ExpressionPtr parse_not() {
    if (at_name("not")) {
      Nesting nesting(*this);
      nesting.enter(current());
      const Location location = advance().location;
      return make_expression(location, Unary{UnaryOperator::logical_not, parse_not()});
    }
    return parse_compare();
  }

  bool comparison_operator(BinaryOperator& op) {
    static const std::pair<const char*, BinaryOperator> kSymbols[] = {
        {"==", BinaryOperator::equal}, {"!=", BinaryOperator::not_equal},    {"<", BinaryOperator::less},
        {"<=", BinaryOperator::less_equal}, {">", BinaryOperator::greater}, {">=", BinaryOperator::greater_equal}};
    for (const auto& [symbol, candidate] : kSymbols) {
      if (accept_symbol(symbol)) {
        op = candidate;
        return true;
      }
    }
    if (accept_name("in")) {
      op = BinaryOperator::in;
      return true;
    }
    if (at_name("not") && peek().kind == TokenKind::name && peek().text == "in") {
      advance();
      advance();
      op = BinaryOperator::not_in;
      return true;
    }
    return false;
  }

  ExpressionPtr parse_compare() {
    const Location location = current().location;
    ExpressionPtr left = parse_math1();
    BinaryOperator op;
    if (!comparison_operator(op)) return left;
    ExpressionPtr comparison = binary(location, op, std::move(left), parse_math1());
    const Token& next = current();
    if (comparison_operator(op)) {
      fail(next, "chained comparisons (a < b < c) are not supported by tune's chat template interpreter");
    }
    return comparison;
  }

  ExpressionPtr parse_math1() {
    Nesting chain(*this);
    ExpressionPtr left = parse_concat();
    while (at_symbol("+") || at_symbol("-")) {
      chain.enter(current());
      const Token& token = advance();
      const BinaryOperator op = token.text == "+" ? BinaryOperator::add : BinaryOperator::subtract;
      left = binary(token.location, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExpressionPtr parse_concat() {
    Nesting chain(*this);
    ExpressionPtr left = parse_math2();
    while (at_symbol("~")) {
      chain.enter(current());
      const Location location = advance().location;
      left = binary(location, BinaryOperator::concatenate, std::move(left), parse_math2());
    }
    return left;
  }

  ExpressionPtr parse_math2() {
    Nesting chain(*this);
    ExpressionPtr left = parse_power();
    while (at_symbol("*") || at_symbol("/") || at_symbol("//") || at_symbol("%")) {
      chain.enter(current());
      const Token& token = advance();
      const BinaryOperator op = token.text == "*"    ? BinaryOperator::multiply
                                : token.text == "/"  ? BinaryOperator::divide
                                : token.text == "//" ? BinaryOperator::floor_divide
                                                     : BinaryOperator::modulo;
      left = binary(token.location, op, std::move(left), parse_power());
    }
    return left;
  }

  ExpressionPtr parse_power() {
    Nesting chain(*this);
    ExpressionPtr left = parse_unary(true);
    while (at_symbol("**")) {
      chain.enter(current());
      const Location location = advance().location;
      left = binary(location, BinaryOperator::power, std::move(left), parse_unary(true));
    }
    return left;
  }

  // As in jinja2, filters bind looser than a unary minus: `-3|abs` is abs(-3).
  ExpressionPtr parse_unary(bool with_filters) {
    const Location location = current().location;
    ExpressionPtr expression;
    Nesting nesting(*this);
    if (at_symbol("-") || at_symbol("+")) nesting.enter(current());
    if (accept_symbol("-")) {
      expression = make_expression(location, Unary{UnaryOperator::negate, parse_unary(false)});
    } else if (accept_symbol("+")) {
      expression = make_expression(location, Unary{UnaryOperator::plus, parse_unary(false)});
    } else {
      expression = parse_postfix(parse_primary());
    }
    return with_filters ? parse_filters_and_tests(std::move(expression)) : std::move(expression);
  }

  ExpressionPtr parse_primary() {
    const Token& token = current();
    switch (token.kind) {
      case TokenKind::name: {
        advance();
        if (token.text == "true" || token.text == "True") return make_expression(token.location, Literal{true});
        if (token.text == "false" || token.text == "False") return make_expression(token.location, Literal{false});
        if (token.text == "none" || token.text == "None") return make_expression(token.location, Literal{Value()});
        return make_expression(token.location, Variable{token.text});
      }
      case TokenKind::string:
        advance();
        return make_expression(token.location, Literal{Value(token.text)});
      case TokenKind::integer:
        advance();
        try {
          return make_expression(token.location, Literal{Value(static_cast<int64_t>(std::stoll(token.text)))});
        } catch (const std::out_of_range&) {
          fail(token, fmt::format("integer literal {} is out of range", token.text));
        }
      case TokenKind::floating:
        advance();
        // strtod, not stod: a literal beyond double's range is inf, as Python's float() makes it (stod throws).
        return make_expression(token.location, Literal{Value(std::strtod(token.text.c_str(), nullptr))});
      case TokenKind::symbol:
        if (accept_symbol("(")) {
          ExpressionPtr inner = parse_tuple(true);
          expect_symbol(")");
          return inner;
        }
        if (accept_symbol("[")) return parse_list(token.location);
        if (accept_symbol("{")) return parse_dict(token.location);
        [[fallthrough]];
      default:
        fail(token, fmt::format("expected an expression, got {}", describe(token)));
    }
  }

  ExpressionPtr parse_list(Location location) {
    ListLiteral list;
    while (!accept_symbol("]")) {
      if (!list.items.empty()) {
        expect_symbol(",");
        if (accept_symbol("]")) break;  // trailing comma
      }
      list.items.push_back(parse_expression(true));
    }
    return make_expression(location, std::move(list));
  }

  ExpressionPtr parse_dict(Location location) {
    DictLiteral dict;
    while (!accept_symbol("}")) {
      if (!dict.entries.empty()) {
        expect_symbol(",");
        if (accept_symbol("}")) break;
      }
      ExpressionPtr key = parse_expression(true);
      expect_symbol(":");
      dict.entries.emplace_back(std::move(key), parse_expression(true));
    }
    return make_expression(location, std::move(dict));
  }

  // Postfix nodes are located at the start of the whole expression (`'x'.bad()` at the quote).
  ExpressionPtr parse_postfix(ExpressionPtr expression) {
    const Location location = expression->location;
    Nesting chain(*this);
    while (true) {
      if (at_symbol(".") || at_symbol("[") || at_symbol("(")) chain.enter(current());
      if (accept_symbol(".")) {
        if (current().kind == TokenKind::integer) {  // jinja2 reads `items.0` as items[0]
          const Token& index = advance();
          int64_t number = 0;
          try {
            number = std::stoll(index.text);
          } catch (const std::out_of_range&) {  // as for integer literals (parse_primary)
            fail(index, fmt::format("integer index {} is out of range", index.text));
          }
          ExpressionPtr position = make_expression(index.location, Literal{Value(number)});
          expression = make_expression(location, Subscript{std::move(expression), std::move(position)});
        } else {
          expression = make_expression(location, Attribute{std::move(expression), expect_identifier("an attribute name")});
        }
      } else if (accept_symbol("[")) {
        expression = parse_subscript(location, std::move(expression));
      } else if (accept_symbol("(")) {
        expression = make_expression(location, Call{std::move(expression), parse_arguments()});
      } else {
        return expression;
      }
    }
  }

  ExpressionPtr parse_subscript(Location location, ExpressionPtr object) {  // after '['
    ExpressionPtr start;
    if (!at_symbol(":")) {
      start = parse_expression(true);
      if (accept_symbol("]")) return make_expression(location, Subscript{std::move(object), std::move(start)});
    }
    Slice slice{std::move(object), std::move(start), nullptr, nullptr};
    expect_symbol(":");
    if (!at_symbol("]") && !at_symbol(":")) slice.stop = parse_expression(true);
    if (accept_symbol(":") && !at_symbol("]")) slice.step = parse_expression(true);
    expect_symbol("]");
    return make_expression(location, std::move(slice));
  }

  // After the opening parenthesis: positional arguments, then `name=value` ones.
  Arguments parse_arguments() {
    Arguments arguments;
    bool first = true;
    while (!accept_symbol(")")) {
      if (!first) {
        expect_symbol(",");
        if (accept_symbol(")")) break;
      }
      first = false;
      if (at_symbol("*") || at_symbol("**")) fail(current(), "*args and **kwargs are not supported");
      if (current().kind == TokenKind::name && peek().kind == TokenKind::symbol && peek().text == "=") {
        std::string name = advance().text;
        advance();
        arguments.keyword.emplace_back(std::move(name), parse_expression(true));
      } else {
        if (!arguments.keyword.empty()) fail(current(), "a positional argument follows a keyword argument");
        arguments.positional.push_back(parse_expression(true));
      }
    }
    return arguments;
  }

  ExpressionPtr parse_filters_and_tests(ExpressionPtr expression) {
    Nesting chain(*this);
    while (true) {
      if (at_symbol("|") || at_name("is") || at_symbol("(")) chain.enter(current());
      const Location location = current().location;
      if (accept_symbol("|")) {
        FilterCall filter{std::move(expression), expect_dotted_name("a filter name"), {}};
        if (accept_symbol("(")) filter.arguments = parse_arguments();
        expression = make_expression(location, std::move(filter));
      } else if (accept_name("is")) {
        TestCall test{std::move(expression), {}, {}, accept_name("not")};
        test.test = expect_dotted_name("a test name");
        if (accept_symbol("(")) {
          test.arguments = parse_arguments();
        } else if (starts_test_argument()) {
          // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses.
          test.arguments.positional.push_back(parse_postfix(parse_primary()));
        }
        expression = make_expression(location, std::move(test));
      } else if (accept_symbol("(")) {
        expression = make_expression(location, Call{std::move(expression), parse_arguments()});
      } else {
        return expression;
      }
    }
  }

  bool starts_test_argument() const {
    const Token& token = current();
    if (token.kind == TokenKind::name) return token.text != "else" && token.text != "or" && token.text != "and" &&
                                              token.text != "is" && token.text != "if";
    if (token.kind == TokenKind::string || token.kind == TokenKind::integer || token.kind == TokenKind::floating)
      return true;
    return at_symbol("[") || at_symbol("{");
  }

  std::string expect_dotted_name(const char* what) {
    std::string name = expect_identifier(what);
    while (at_symbol(".") && peek().kind == TokenKind::name) {
      advance();
      name += "." + advance().text;
    }
    return name;
  }

  const std::vector<Token>& tokens_;
  std::string template_name_;
  size_t index_ = 0;
  int nesting_ = 0;  // levels held by Nesting objects
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, const std::string& template_name) {
  return Parser(tokens, template_name).parse_all();
}

}  // namespace tune::jinja
