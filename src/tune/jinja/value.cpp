// Python semantics for the template's values: truthiness, equality and ordering.
#include "tune/jinja/value.h"

#include <fmt/format.h>

namespace tune::jinja {

const Value* Map::find(const std::string& key) const {
  for (const auto& [name, value] : entries_)
    if (name == key) return &value;
  return nullptr;
}

void Map::set(const std::string& key, Value value) {
  for (auto& [name, existing] : entries_) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  entries_.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string name) {
  Value value;
  value.kind_ = Kind::undefined;
  value.name_ = std::move(name);
  return value;
}

Value Value::namespace_object(Map attributes) {
  Value value(std::move(attributes));
  value.is_namespace_ = true;
  return value;
}

Value Value::tuple(List items) {
  Value value(std::move(items));
  value.is_tuple_ = true;
  return value;
}

Value Value::function(std::string name, Function function) {
  Value value;
  value.kind_ = Kind::function;
  value.data_ = std::make_shared<Function>(std::move(function));
  value.name_ = std::move(name);
  return value;
}

int64_t Value::as_int() const {
  if (kind_ == Kind::boolean) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (kind_ == Kind::floating) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

Value Value::call(const CallArguments& arguments) const {
  if (kind_ != Kind::function) throw EvaluationError(fmt::format("'{}' object is not callable", type_name()));
  return (*std::get<std::shared_ptr<Function>>(data_))(arguments);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return as_bool();
    case Kind::integer:
      return as_int() != 0;
    case Kind::floating:
      return as_float() != 0.0;
    case Kind::string:
      return !as_string().empty();
    case Kind::list:
      return !as_list().empty();
    case Kind::map:
      return is_namespace_ || as_map().size() != 0;  // a namespace is an object, always true
    case Kind::function:
      return true;
  }
  return false;
}

bool Value::operator==(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_float() == other.as_float();
    return as_int() == other.as_int();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::string:
      return as_string() == other.as_string();
    case Kind::list:
      return is_tuple_ == other.is_tuple_ && as_list() == other.as_list();  // Python: (1, 2) != [1, 2]
    case Kind::map: {
      if (is_namespace_ || other.is_namespace_) return data_ == other.data_;  // objects compare by identity
      const Map& mine = as_map();
      const Map& theirs = other.as_map();
      if (mine.size() != theirs.size()) return false;
      for (const auto& [key, value] : mine.entries()) {
        const Value* match = theirs.find(key);
        if (match == nullptr || *match != value) return false;
      }
      return true;
    }
    case Kind::function:
      return data_ == other.data_;
    default:
      return false;  // numbers were handled above
  }
}

bool Value::less_than(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_float() < other.as_float();
    return as_int() < other.as_int();
  }
  if (is_string() && other.is_string()) return as_string() < other.as_string();  // UTF-8 bytes order as code points
  if (is_list() && other.is_list()) {
    const List& mine = as_list();
    const List& theirs = other.as_list();
    for (size_t i = 0; i < mine.size() && i < theirs.size(); ++i) {
      if (mine[i] != theirs[i]) return mine[i].less_than(theirs[i]);
    }
    return mine.size() < theirs.size();
  }
  throw EvaluationError(
      fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(), other.type_name()));
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::list:
      return "list";
    case Kind::map:
      return is_namespace_ ? "Namespace" : "dict";
    case Kind::function:
      return "function";
  }
  return "object";
}

}  // namespace tune::jinja
