// The parsed template: expressions and statements, each with the place in the source it came from.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tune/jinja/lexer.h"
#include "tune/jinja/value.h"

namespace tune::jinja {

struct Expression;
using ExpressionPtr = std::unique_ptr<Expression>;

struct Arguments {
  std::vector<ExpressionPtr> positional;
  std::vector<std::pair<std::string, ExpressionPtr>> keyword;
};

struct Literal {
  Value value;
};
struct Variable {
  std::string name;
};
struct ListLiteral {
  std::vector<ExpressionPtr> items;
  bool is_tuple = false;  // `(a, b)` or `a, b`
};
struct DictLiteral {
  std::vector<std::pair<ExpressionPtr, ExpressionPtr>> entries;
};
// `object.name`: jinja2 tries the attribute (a dict key here), then the item.
struct Attribute {
  ExpressionPtr object;
  std::string name;
};
struct Subscript {
  ExpressionPtr object;
  ExpressionPtr index;
};
// `object[start:stop:step]`; a missing part is null.
struct Slice {
  ExpressionPtr object;
  ExpressionPtr start, stop, step;
};
struct Call {
  ExpressionPtr callee;
  Arguments arguments;
};
struct FilterCall {
  ExpressionPtr operand;
  std::string filter;
  Arguments arguments;
};
// `operand is [not] test(arguments)`.
struct TestCall {
  ExpressionPtr operand;
  std::string test;
  Arguments arguments;
  bool negated = false;
};
enum class UnaryOperator { logical_not, negate, plus };
struct Unary {
  UnaryOperator op;
  ExpressionPtr operand;
};
enum class BinaryOperator {
  add, subtract, multiply, divide, floor_divide, modulo, power, concatenate,
  equal, not_equal, less, less_equal, greater, greater_equal, in, not_in,
  logical_and, logical_or,
};
struct Binary {
  BinaryOperator op;
  ExpressionPtr left, right;
};
// `if_true if condition else if_false`; without `else`, if_false is null and the result undefined.
struct Conditional {
  ExpressionPtr condition, if_true, if_false;
};

struct Expression {
  Location location;
  std::variant<Literal, Variable, ListLiteral, DictLiteral, Attribute, Subscript, Slice, Call, FilterCall, TestCall,
               Unary, Binary, Conditional>
      node;
};

struct Statement;
using Body = std::vector<Statement>;

struct TextOutput {
  std::string text;
};
struct ExpressionOutput {
  ExpressionPtr expression;
};
struct IfStatement {
  std::vector<std::pair<ExpressionPtr, Body>> branches;  // `if` and each `elif`
  Body otherwise;
};
struct ForStatement {
  std::vector<std::string> targets;  // `for a, b in ...` unpacks
  ExpressionPtr iterable;
  ExpressionPtr filter;  // `for x in xs if cond`; null when absent
  Body body;
  Body otherwise;  // rendered when no item was iterated
};
// `{% set name = value %}`, `{% set a, b = value %}`, `{% set ns.attribute = value %}`, or a block set
// `{% set name %}body{% endset %}` (value null).
struct SetStatement {
  std::vector<std::string> targets;
  std::string attribute;  // non-empty for a namespace attribute assignment; targets then holds the namespace
  ExpressionPtr value;
  Body body;
};
struct MacroStatement {
  std::string name;
  std::vector<std::pair<std::string, ExpressionPtr>> parameters;  // default is null when required
  Body body;
};
struct BreakStatement {};
struct ContinueStatement {};
// transformers' `{% generation %}` marks assistant text for its token mask; rendering just outputs the body.
struct GenerationBlock {
  Body body;
};

struct Statement {
  Location location;
  std::variant<TextOutput, ExpressionOutput, IfStatement, ForStatement, SetStatement, MacroStatement, BreakStatement,
               ContinueStatement, GenerationBlock>
      node;
};

}  // namespace tune::jinja
