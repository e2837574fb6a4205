// Python-style argument binding for the builtin filters, tests, methods and globals.
#include "tune/jinja/arguments.h"

#include <fmt/format.h>

namespace tune::jinja {

BoundArguments::BoundArguments(const CallArguments& call, std::string_view callee,
                               std::initializer_list<std::string_view> names)
    : values_(names.size(), Value::undefined()) {
  if (call.positional.size() > names.size()) {
    throw EvaluationError(fmt::format("{}() takes at most {} argument(s) ({} given)", callee, names.size(),
                                      call.positional.size()));
  }
  for (size_t i = 0; i < call.positional.size(); ++i) values_[i] = call.positional[i];
  for (const auto& [keyword, value] : call.keyword) {
    size_t i = 0;
    for (std::string_view name : names) {
      if (name == keyword) break;
      ++i;
    }
    if (i == names.size()) throw EvaluationError(fmt::format("{}() got an unexpected keyword argument '{}'", callee, keyword));
    if (i < call.positional.size()) {
      throw EvaluationError(fmt::format("{}() got multiple values for argument '{}'", callee, keyword));
    }
    values_[i] = value;
  }
}

Value BoundArguments::get(size_t i, const Value& fallback) const {
  return values_[i].is_undefined() ? fallback : values_[i];
}

}  // namespace tune::jinja
