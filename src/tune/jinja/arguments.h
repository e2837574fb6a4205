// Binds a call's positional and keyword arguments to a filter's, test's, method's or global's parameter names,
// as Python would, so each builtin reads its parameters by position with a default.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tune/jinja/value.h"

namespace tune::jinja {

class BoundArguments {
 public:
  // Throws EvaluationError for too many positional arguments or an unknown or repeated keyword.
  BoundArguments(const CallArguments& call, std::string_view callee, std::initializer_list<std::string_view> names);

  // The i-th parameter, or `fallback` when the call did not pass it.
  Value get(size_t i, const Value& fallback = Value::undefined()) const;
  bool has(size_t i) const { return !values_[i].is_undefined(); }

 private:
  std::vector<Value> values_;
};

}  // namespace tune::jinja
