// Expression evaluation: each AST node to a Value, Python semantics delegated to operators.cpp and builtins.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/jinja/operators.h"
#include "tune/jinja/python_text.h"
#include "tune/jinja/renderer.h"

namespace tune::jinja {
namespace {

std::optional<int64_t> slice_bound(const Value& value) {
  if (value.is_none() || value.is_undefined()) return std::nullopt;
  if (!value.is_int() && !value.is_bool()) {
    throw EvaluationError("slice indices must be integers or None");
  }
  return value.as_int();
}

}  // namespace

void Renderer::fail(Location location, const std::string& message) const {
  throw InputError(located_message(template_name_, location, message));
}

Value Renderer::lookup(const std::string& name, const Scope& scope) const {
  for (const Scope* current = &scope; current != nullptr; current = current->parent) {
    if (const Value* found = current->variables.find(name)) return *found;
  }
  if (const Value* found = context_.find(name)) return *found;
  if (const Value* found = globals_.find(name)) return *found;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

// The innermost failing expression names its own line and column; outer ones pass the InputError through.
// Nested expressions, and macros calling macros, recurse through here: past kMaxDepth that is an error, as
// jinja2's RecursionError, not a stack overflow (a template that calls itself forever, or a very deep one).
void Renderer::spend_work(Location location) {
  if (++work_ > kMaxWork) {
    fail(location, fmt::format("the template does more than {} steps of work rendering one conversation (a loop "
                               "that never ends, or nested loops over long values)", kMaxWork));
  }
}

Value Renderer::evaluate(const Expression& expression, const Scope& scope) {
  spend_work(expression.location);
  if (depth_ >= kMaxDepth) {
    fail(expression.location, fmt::format("maximum recursion depth exceeded (expressions and macro calls nest more "
                                          "than {} deep)", kMaxDepth));
  }
  struct Deeper {
    int& depth;
    explicit Deeper(int& d) : depth(++d) {}
    ~Deeper() { --depth; }
  } deeper(depth_);
  try {
    return evaluate_node(expression, scope);
  } catch (const EvaluationError& error) {
    fail(expression.location, error.what());
  }
}

CallArguments Renderer::evaluate_arguments(const Arguments& arguments, const Scope& scope) {
  CallArguments values;
  for (const ExpressionPtr& argument : arguments.positional) values.positional.push_back(evaluate(*argument, scope));
  for (const auto& [name, argument] : arguments.keyword) values.keyword.emplace_back(name, evaluate(*argument, scope));
  return values;
}

Value Renderer::evaluate_call(const Call& call, const Scope& scope) {
  const CallArguments arguments = evaluate_arguments(call.arguments, scope);
  if (const auto* attribute = std::get_if<Attribute>(&call.callee->node)) {
    // `object.name(...)`: as jinja2's getattr, a Python method comes before a dict key of the same name.
    const Value object = evaluate(*attribute->object, scope);
    if (object.is_undefined()) throw EvaluationError(object.name());
    if (std::optional<Value> result = call_method(object, attribute->name, arguments)) return *result;
    const Value member = get_attribute(object, attribute->name);
    if (member.is_function()) return member.call(arguments);
    throw EvaluationError(fmt::format("'{}' object has no method '{}'", object.type_name(), attribute->name));
  }
  const Value callee = evaluate(*call.callee, scope);
  if (callee.is_undefined()) throw EvaluationError(callee.name());
  return callee.call(arguments);
}

Value Renderer::evaluate_slice(const Slice& slice_node, const Scope& scope) {
  const Value object = evaluate(*slice_node.object, scope);
  auto bound = [&](const ExpressionPtr& part) {
    return part ? slice_bound(evaluate(*part, scope)) : std::nullopt;
  };
  return slice(object, bound(slice_node.start), bound(slice_node.stop), bound(slice_node.step));
}

Value Renderer::evaluate_node(const Expression& expression, const Scope& scope) {
  const auto& node = expression.node;
  if (const auto* literal = std::get_if<Literal>(&node)) return literal->value;
  if (const auto* variable = std::get_if<Variable>(&node)) return lookup(variable->name, scope);
  if (const auto* list = std::get_if<ListLiteral>(&node)) {
    List items;
    for (const ExpressionPtr& item : list->items) items.push_back(evaluate(*item, scope));
    return list->is_tuple ? Value::tuple(std::move(items)) : Value(std::move(items));
  }
  if (const auto* dict = std::get_if<DictLiteral>(&node)) {
    Map map;
    for (const auto& [key_expression, value_expression] : dict->entries) {
      const Value key = evaluate(*key_expression, scope);
      if (!key.is_string()) throw EvaluationError("dict keys must be strings in chat templates");
      map.set(key.as_string(), evaluate(*value_expression, scope));
    }
    return Value(map);
  }
  if (const auto* attribute = std::get_if<Attribute>(&node)) {
    return get_attribute(evaluate(*attribute->object, scope), attribute->name);
  }
  if (const auto* subscript = std::get_if<Subscript>(&node)) {
    const Value object = evaluate(*subscript->object, scope);
    return get_item(object, evaluate(*subscript->index, scope));
  }
  if (const auto* slice_node = std::get_if<Slice>(&node)) return evaluate_slice(*slice_node, scope);
  if (const auto* call = std::get_if<Call>(&node)) return evaluate_call(*call, scope);
  if (const auto* filter = std::get_if<FilterCall>(&node)) {
    const Value operand = evaluate(*filter->operand, scope);
    return apply_filter(filter->filter, operand, evaluate_arguments(filter->arguments, scope));
  }
  if (const auto* test = std::get_if<TestCall>(&node)) {
    const Value operand = evaluate(*test->operand, scope);
    return Value(apply_test(test->test, operand, evaluate_arguments(test->arguments, scope)) != test->negated);
  }
  if (const auto* unary = std::get_if<Unary>(&node)) return apply_unary(unary->op, evaluate(*unary->operand, scope));
  if (const auto* binary = std::get_if<Binary>(&node)) {
    const Value left = evaluate(*binary->left, scope);
    // and/or short-circuit and return an operand, as in Python: `x or 'default'`.
    if (binary->op == BinaryOperator::logical_and) return left.truthy() ? evaluate(*binary->right, scope) : left;
    if (binary->op == BinaryOperator::logical_or) return left.truthy() ? left : evaluate(*binary->right, scope);
    return apply_binary(binary->op, left, evaluate(*binary->right, scope));
  }
  const auto& conditional = std::get<Conditional>(node);
  if (evaluate(*conditional.condition, scope).truthy()) return evaluate(*conditional.if_true, scope);
  if (conditional.if_false) return evaluate(*conditional.if_false, scope);
  return Value::undefined("the conditional expression has no else branch");
}

}  // namespace tune::jinja
