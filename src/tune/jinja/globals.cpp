// The functions transformers puts in every chat template's globals, plus jinja2's own range() and dict().
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/jinja/arguments.h"
#include "tune/jinja/builtins.h"
#include "tune/jinja/python_text.h"

namespace tune::jinja {
namespace {

Value range(const CallArguments& call) {
  if (!call.keyword.empty() || call.positional.empty() || call.positional.size() > 3) {
    throw EvaluationError("range() takes 1 to 3 positional integer arguments");
  }
  for (const Value& argument : call.positional) {
    if (!argument.is_int() && !argument.is_bool()) {
      throw EvaluationError(fmt::format("'{}' object cannot be interpreted as an integer", argument.type_name()));
    }
  }
  const bool one = call.positional.size() == 1;
  const int64_t start = one ? 0 : call.positional[0].as_int();
  const int64_t stop = one ? call.positional[0].as_int() : call.positional[1].as_int();
  const int64_t step = call.positional.size() == 3 ? call.positional[2].as_int() : 1;
  if (step == 0) throw EvaluationError("range() arg 3 must not be zero");
  // jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
  constexpr int64_t kMaxRange = 100000;
  List numbers;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(numbers.size()) >= kMaxRange) throw EvaluationError("range too big");
    numbers.emplace_back(i);
  }
  return Value(numbers);
}

// namespace(mapping?, **attributes) and dict(mapping?, **items): a positional dict is copied first.
Map attributes_from(const CallArguments& call, const char* callee) {
  Map attributes;
  if (call.positional.size() > 1) throw EvaluationError(fmt::format("{}() takes at most one positional argument", callee));
  if (!call.positional.empty()) {
    if (!call.positional[0].is_map()) throw EvaluationError(fmt::format("{}() positional argument must be a dict", callee));
    for (const auto& [key, value] : call.positional[0].as_map().entries()) attributes.set(key, value);
  }
  for (const auto& [key, value] : call.keyword) attributes.set(key, value);
  return attributes;
}

}  // namespace

Map make_globals(const StrftimeNow& strftime_now) {
  Map globals;
  globals.set("raise_exception", Value::function("raise_exception", [](const CallArguments& call) -> Value {
    const BoundArguments arguments(call, "raise_exception", {"message"});
    // The template's own message, unchanged: it is written for the user (e.g. "roles must alternate").
    throw InputError(python_str(arguments.get(0, Value(""))));
  }));
  globals.set("strftime_now", Value::function("strftime_now", [strftime_now](const CallArguments& call) {
    const BoundArguments arguments(call, "strftime_now", {"format"});
    const Value format = arguments.get(0, Value());
    if (!format.is_string()) throw EvaluationError("strftime_now() argument must be a format string");
    return Value(strftime_now(format.as_string()));
  }));
  globals.set("namespace", Value::function("namespace", [](const CallArguments& call) {
    const Map attributes = attributes_from(call, "namespace");
    for (const auto& entry : attributes.entries()) {
      if (!entry.first.empty() && entry.first[0] == '_') {
        throw EvaluationError(fmt::format("Chat templates cannot store underscore-prefixed attributes on a "
                                          "namespace, but got '{}'", entry.first));
      }
    }
    return Value::namespace_object(attributes);
  }));
  globals.set("dict", Value::function("dict", [](const CallArguments& call) { return Value(attributes_from(call, "dict")); }));
  globals.set("range", Value::function("range", range));
  return globals;
}

}  // namespace tune::jinja
