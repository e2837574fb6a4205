// jinja2's tests, the predicates after `is`: `x is defined`, `x is string`, `n is divisibleby 3`, ...
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "tune/jinja/arguments.h"
#include "tune/jinja/builtins.h"
#include "tune/jinja/operators.h"

namespace tune::jinja {
namespace {

using Test = std::function<bool(const Value&, const CallArguments&)>;

bool is_lower_or_upper(const Value& value, bool upper) {
  if (!value.is_string()) return false;
  bool cased = false;
  for (char c : value.as_string()) {
    if (std::islower(static_cast<unsigned char>(c))) {
      if (upper) return false;
      cased = true;
    } else if (std::isupper(static_cast<unsigned char>(c))) {
      if (!upper) return false;
      cased = true;
    }
  }
  return cased;
}

Value only_argument(const CallArguments& arguments, const char* test) {
  return BoundArguments(arguments, test, {"other"}).get(0, Value());
}

Test comparison(BinaryOperator op, const char* name) {
  return [op, name](const Value& value, const CallArguments& arguments) {
    return apply_binary(op, value, only_argument(arguments, name)).truthy();
  };
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = [] {
    std::map<std::string, Test> t;
    auto no_arguments = [](bool (*predicate)(const Value&)) -> Test {
      return [predicate](const Value& value, const CallArguments&) { return predicate(value); };
    };
    t["defined"] = no_arguments([](const Value& v) { return !v.is_undefined(); });
    t["undefined"] = no_arguments([](const Value& v) { return v.is_undefined(); });
    t["none"] = no_arguments([](const Value& v) { return v.is_none(); });
    t["boolean"] = no_arguments([](const Value& v) { return v.is_bool(); });
    t["true"] = no_arguments([](const Value& v) { return v.is_bool() && v.as_bool(); });
    t["false"] = no_arguments([](const Value& v) { return v.is_bool() && !v.as_bool(); });
    t["integer"] = no_arguments([](const Value& v) { return v.is_int(); });  // bools are not integers here
    t["float"] = no_arguments([](const Value& v) { return v.is_float(); });
    t["number"] = no_arguments([](const Value& v) { return v.is_number(); });
    t["string"] = no_arguments([](const Value& v) { return v.is_string(); });
    t["mapping"] = no_arguments([](const Value& v) { return v.is_map() && !v.is_namespace(); });
    // Undefined iterates (as empty), so it is iterable, as in jinja2.
    t["iterable"] = no_arguments(
        [](const Value& v) { return v.is_undefined() || v.is_string() || v.is_list() || (v.is_map() && !v.is_namespace()); });
    t["sequence"] = no_arguments([](const Value& v) { return v.is_string() || v.is_list() || (v.is_map() && !v.is_namespace()); });
    t["callable"] = no_arguments([](const Value& v) { return v.is_function(); });
    t["lower"] = no_arguments([](const Value& v) { return is_lower_or_upper(v, false); });
    t["upper"] = no_arguments([](const Value& v) { return is_lower_or_upper(v, true); });
    t["odd"] = no_arguments([](const Value& v) { return v.is_number() && !v.is_float() && v.as_int() % 2 != 0; });
    t["even"] = no_arguments([](const Value& v) { return v.is_number() && !v.is_float() && v.as_int() % 2 == 0; });
    t["divisibleby"] = [](const Value& value, const CallArguments& arguments) {
      return apply_binary(BinaryOperator::modulo, value, only_argument(arguments, "divisibleby")) == Value(0);
    };
    t["sameas"] = [](const Value& value, const CallArguments& arguments) {
      // Python's `is`: only None and the bools are singletons a template can compare.
      const Value other = only_argument(arguments, "sameas");
      if (value.is_none() || other.is_none()) return value.is_none() && other.is_none();
      if (value.is_bool() || other.is_bool()) return value.is_bool() && other.is_bool() && value == other;
      return false;
    };
    t["in"] = [](const Value& value, const CallArguments& arguments) {
      return apply_binary(BinaryOperator::in, value, only_argument(arguments, "in")).truthy();
    };
    for (const char* name : {"eq", "equalto", "=="}) t[name] = comparison(BinaryOperator::equal, name);
    for (const char* name : {"ne", "!="}) t[name] = comparison(BinaryOperator::not_equal, name);
    for (const char* name : {"lt", "lessthan", "<"}) t[name] = comparison(BinaryOperator::less, name);
    for (const char* name : {"le", "<="}) t[name] = comparison(BinaryOperator::less_equal, name);
    for (const char* name : {"gt", "greaterthan", ">"}) t[name] = comparison(BinaryOperator::greater, name);
    for (const char* name : {"ge", ">="}) t[name] = comparison(BinaryOperator::greater_equal, name);
    return t;
  }();
  return table;
}

}  // namespace

bool apply_test(const std::string& name, const Value& value, const CallArguments& arguments) {
  const auto found = tests().find(name);
  if (found == tests().end()) throw EvaluationError(fmt::format("no test named '{}'", name));
  return found->second(value, arguments);
}

}  // namespace tune::jinja
