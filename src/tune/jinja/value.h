// The dynamic value a chat template computes with: Python's None, bool, int, float, str, list and dict, plus
// jinja2's Undefined and the callables a template can call (globals, macros). Lists and dicts are shared by
// reference as in Python, which is what lets `{% set ns.x = ... %}` change a namespace seen from an outer scope.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tune::jinja {

class Value;
using List = std::vector<Value>;

// A dict with string keys that iterates in insertion order, as Python's dict does.
class Map {
 public:
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  size_t size() const;  // defined below Value: clang instantiates the vector's size() where it is written
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

struct CallArguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(const CallArguments&)>;

// A failure while evaluating a template (a Python TypeError, an unknown method, ...). The renderer adds the
// template name, line and column before it reaches the user as tune::InputError.
class EvaluationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, map, function };

  Value() : kind_(Kind::none) {}
  static Value undefined(std::string name = {});
  Value(bool b) : kind_(Kind::boolean), data_(b) {}
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(int64_t i) : kind_(Kind::integer), data_(i) {}
  Value(double d) : kind_(Kind::floating), data_(d) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::string s) : kind_(Kind::string), data_(std::move(s)) {}
  Value(List list) : kind_(Kind::list), data_(std::make_shared<List>(std::move(list))) {}
  Value(Map map) : kind_(Kind::map), data_(std::make_shared<Map>(std::move(map))) {}
  // jinja2's namespace(): a dict whose attributes `{% set ns.name = ... %}` may assign.
  static Value namespace_object(Map attributes);
  static Value function(std::string name, Function function);
  // A Python tuple: a list that prints as (a, b), from dict.items() pairs and `(a, b)` literals.
  static Value tuple(List items);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  // Python's bool is an int, so True + 1 == 2 and `true is number` holds.
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::floating || kind_ == Kind::boolean; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_map() const { return kind_ == Kind::map; }
  bool is_namespace() const { return kind_ == Kind::map && is_namespace_; }
  bool is_function() const { return kind_ == Kind::function; }
  bool is_tuple() const { return kind_ == Kind::list && is_tuple_; }

  bool as_bool() const { return std::get<bool>(data_); }
  // An int or a bool as Python's int.
  int64_t as_int() const;
  // Any number as Python's float.
  double as_float() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  const Map& as_map() const { return *std::get<std::shared_ptr<Map>>(data_); }
  // Only namespaces are changed after creation (the sandbox makes other lists and dicts immutable).
  Map& namespace_attributes() const { return *std::get<std::shared_ptr<Map>>(data_); }
  Value call(const CallArguments& arguments) const;
  // The variable name an undefined value came from, or the function's name, for error messages.
  const std::string& name() const { return name_; }

  // Python's truth value; Undefined is false.
  bool truthy() const;
  // Python's ==: 1 == 1.0 == True, lists and dicts compare element by element.
  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }
  // Python's <: numbers with numbers, strings with strings, lists lexicographically; anything else throws.
  bool less_than(const Value& other) const;
  // Python's type name, for error messages ("str", "int", "NoneType", ...).
  std::string type_name() const;

 private:
  Kind kind_;
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<List>, std::shared_ptr<Map>,
               std::shared_ptr<Function>>
      data_;
  std::string name_;
  bool is_namespace_ = false;
  bool is_tuple_ = false;
};

inline size_t Map::size() const { return entries_.size(); }

}  // namespace tune::jinja
