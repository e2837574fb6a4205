// Operators and element access with Python's semantics and Python's TypeError messages.
#include "tune/jinja/operators.h"

#include <cmath>

#include <fmt/format.h>

#include "tune/jinja/python_text.h"
#include "tune/jinja/utf8.h"

namespace tune::jinja {
namespace {

[[noreturn]] void unsupported_operands(const char* symbol, const Value& left, const Value& right) {
  throw EvaluationError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", symbol, left.type_name(),
                                    right.type_name()));
}

// jinja2's default Undefined raises on arithmetic, naming the variable.
void reject_undefined(const Value& value) {
  if (value.is_undefined()) throw EvaluationError(value.name().empty() ? "value is undefined" : value.name());
}

bool either_float(const Value& left, const Value& right) { return left.is_float() || right.is_float(); }

Value repeat(const Value& sequence, int64_t times) {
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value(out);
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
  return Value(out);
}

Value add(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (either_float(left, right)) return Value(left.as_float() + right.as_float());
    return Value(left.as_int() + right.as_int());
  }
  if (left.is_string() && right.is_string()) return Value(left.as_string() + right.as_string());
  if (left.is_list() && right.is_list()) {
    List joined = left.as_list();
    joined.insert(joined.end(), right.as_list().begin(), right.as_list().end());
    return Value(joined);
  }
  if (left.is_string()) {
    throw EvaluationError(fmt::format("can only concatenate str (not \"{}\") to str", right.type_name()));
  }
  unsupported_operands("+", left, right);
}

Value multiply(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (either_float(left, right)) return Value(left.as_float() * right.as_float());
    return Value(left.as_int() * right.as_int());
  }
  const bool left_sequence = left.is_string() || left.is_list();
  const bool right_sequence = right.is_string() || right.is_list();
  if (left_sequence && (right.is_int() || right.is_bool())) return repeat(left, right.as_int());
  if (right_sequence && (left.is_int() || left.is_bool())) return repeat(right, left.as_int());
  unsupported_operands("*", left, right);
}

Value divide(BinaryOperator op, const Value& left, const Value& right) {
  const char* symbol = op == BinaryOperator::divide ? "/" : op == BinaryOperator::floor_divide ? "//" : "%";
  if (!left.is_number() || !right.is_number()) unsupported_operands(symbol, left, right);
  if (right.as_float() == 0.0) {
    throw EvaluationError(op == BinaryOperator::modulo ? "integer modulo by zero" : "division by zero");
  }
  if (op == BinaryOperator::divide) return Value(left.as_float() / right.as_float());
  if (!either_float(left, right)) {
    // Python rounds integer division toward negative infinity and gives the remainder the divisor's sign.
    const int64_t a = left.as_int();
    const int64_t b = right.as_int();
    int64_t quotient = a / b;
    int64_t remainder = a % b;
    if (remainder != 0 && ((remainder < 0) != (b < 0))) {
      --quotient;
      remainder += b;
    }
    return op == BinaryOperator::floor_divide ? Value(quotient) : Value(remainder);
  }
  const double a = left.as_float();
  const double b = right.as_float();
  if (op == BinaryOperator::floor_divide) return Value(std::floor(a / b));
  double remainder = std::fmod(a, b);
  if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b;
  return Value(remainder);
}

Value power(const Value& left, const Value& right) {
  if (!left.is_number() || !right.is_number()) unsupported_operands("** or pow()", left, right);
  if (!either_float(left, right) && right.as_int() >= 0) {
    int64_t result = 1;
    for (int64_t i = 0; i < right.as_int(); ++i) result *= left.as_int();
    return Value(result);
  }
  return Value(std::pow(left.as_float(), right.as_float()));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::undefined:
      return false;  // jinja2's Undefined iterates as empty
    case Value::Kind::string:
      if (!item.is_string()) {
        throw EvaluationError(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::list:
      for (const Value& element : container.as_list())
        if (element == item) return true;
      return false;
    case Value::Kind::map:
      return item.is_string() && container.as_map().contains(item.as_string());
    default:
      throw EvaluationError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

// Python's slice.indices(): clamp start and stop into range for the step's direction.
void resolve_slice(int64_t length, std::optional<int64_t> start_in, std::optional<int64_t> stop_in, int64_t step,
                   int64_t& start, int64_t& stop) {
  auto clamp = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index < 0 ? *index + length : *index;
    if (step > 0) return std::min(std::max<int64_t>(i, 0), length);
    return std::min(std::max<int64_t>(i, -1), length - 1);
  };
  start = clamp(start_in, step > 0 ? 0 : length - 1);
  stop = clamp(stop_in, step > 0 ? length : -1);
}

}  // namespace

Value apply_binary(BinaryOperator op, const Value& left, const Value& right) {
  switch (op) {
    case BinaryOperator::concatenate:
      return Value(python_str(left) + python_str(right));
    case BinaryOperator::equal:
      return Value(left == right);
    case BinaryOperator::not_equal:
      return Value(left != right);
    case BinaryOperator::in:
      return Value(contains(right, left));
    case BinaryOperator::not_in:
      return Value(!contains(right, left));
    default:
      break;
  }
  reject_undefined(left);
  reject_undefined(right);
  switch (op) {
    case BinaryOperator::add:
      return add(left, right);
    case BinaryOperator::subtract:
      if (!left.is_number() || !right.is_number()) unsupported_operands("-", left, right);
      if (either_float(left, right)) return Value(left.as_float() - right.as_float());
      return Value(left.as_int() - right.as_int());
    case BinaryOperator::multiply:
      return multiply(left, right);
    case BinaryOperator::divide:
    case BinaryOperator::floor_divide:
      return divide(op, left, right);
    case BinaryOperator::modulo:
      if (left.is_string()) throw EvaluationError("printf-style string formatting ('...' % x) is not supported");
      return divide(op, left, right);
    case BinaryOperator::power:
      return power(left, right);
    case BinaryOperator::less:
      return Value(left.less_than(right));
    case BinaryOperator::less_equal:
      return Value(!right.less_than(left));
    case BinaryOperator::greater:
      return Value(right.less_than(left));
    case BinaryOperator::greater_equal:
      return Value(!left.less_than(right));
    default:
      throw EvaluationError("and/or are evaluated by the renderer");
  }
}

Value apply_unary(UnaryOperator op, const Value& operand) {
  if (op == UnaryOperator::logical_not) return Value(!operand.truthy());
  reject_undefined(operand);
  if (!operand.is_number()) {
    throw EvaluationError(fmt::format("bad operand type for unary {}: '{}'", op == UnaryOperator::negate ? '-' : '+',
                                      operand.type_name()));
  }
  if (op == UnaryOperator::plus) return operand.is_bool() ? Value(operand.as_int()) : operand;
  return operand.is_float() ? Value(-operand.as_float()) : Value(-operand.as_int());
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) reject_undefined(object);
  if (object.is_map()) {
    if (key.is_string()) {
      if (const Value* found = object.as_map().find(key.as_string())) return *found;
    }
    return Value::undefined(fmt::format("'dict object' has no attribute {}", python_repr(key)));
  }
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    const bool is_string = object.is_string();
    std::vector<std::string> characters;
    if (is_string) characters = split_code_points(object.as_string());
    const int64_t length = is_string ? static_cast<int64_t>(characters.size()) : static_cast<int64_t>(object.as_list().size());
    int64_t index = key.as_int();
    if (index < 0) index += length;
    if (index < 0 || index >= length) {
      return Value::undefined(fmt::format("{} object has no element {}", object.type_name(), key.as_int()));
    }
    return is_string ? Value(characters[static_cast<size_t>(index)]) : object.as_list()[static_cast<size_t>(index)];
  }
  return Value::undefined(fmt::format("'{}' object has no attribute {}", object.type_name(), python_repr(key)));
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) reject_undefined(object);
  if (object.is_map()) {
    if (const Value* found = object.as_map().find(name)) return *found;
    return Value::undefined(fmt::format("'{} object' has no attribute '{}'", object.type_name(), name));
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", object.type_name(), name));
}

Value slice(const Value& object, std::optional<int64_t> start_in, std::optional<int64_t> stop_in,
            std::optional<int64_t> step_in) {
  reject_undefined(object);
  const int64_t step = step_in.value_or(1);
  if (step == 0) throw EvaluationError("slice step cannot be zero");
  if (!object.is_list() && !object.is_string()) {
    throw EvaluationError(fmt::format("'{}' object is not subscriptable", object.type_name()));
  }
  const std::vector<std::string> characters =
      object.is_string() ? split_code_points(object.as_string()) : std::vector<std::string>{};
  const int64_t length =
      object.is_string() ? static_cast<int64_t>(characters.size()) : static_cast<int64_t>(object.as_list().size());
  int64_t start = 0;
  int64_t stop = 0;
  resolve_slice(length, start_in, stop_in, step, start, stop);
  std::string text;
  List items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object.is_string()) {
      text += characters[static_cast<size_t>(i)];
    } else {
      items.push_back(object.as_list()[static_cast<size_t>(i)]);
    }
  }
  return object.is_string() ? Value(text) : Value(items);
}

List iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      return value.as_list();
    case Value::Kind::map: {
      List keys;
      for (const auto& entry : value.as_map().entries()) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Kind::string: {
      List characters;
      for (std::string& character : split_code_points(value.as_string())) characters.emplace_back(std::move(character));
      return characters;
    }
    default:
      throw EvaluationError(fmt::format("'{}' object is not iterable", value.type_name()));
  }
}

int64_t length_of(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return static_cast<int64_t>(count_code_points(value.as_string()));
    case Value::Kind::list:
      return static_cast<int64_t>(value.as_list().size());
    case Value::Kind::map:
      return static_cast<int64_t>(value.as_map().size());
    default:
      throw EvaluationError(fmt::format("object of type '{}' has no len()", value.type_name()));
  }
}

}  // namespace tune::jinja
