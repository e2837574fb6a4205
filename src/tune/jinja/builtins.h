// The builtins a template can name: filters (`x|trim`), tests (`x is string`), Python methods on strings and dicts
// (`s.split(',')`, `d.items()`), and the globals transformers provides (raise_exception, strftime_now, namespace).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "tune/jinja/value.h"

namespace tune::jinja {

// Throws EvaluationError for an unknown filter or test, or bad arguments.
Value apply_filter(const std::string& name, const Value& value, const CallArguments& arguments);
bool apply_test(const std::string& name, const Value& value, const CallArguments& arguments);

// A Python method call `object.name(arguments)`; nullopt when `object` has no such method.
std::optional<Value> call_method(const Value& object, const std::string& name, const CallArguments& arguments);

// strftime_now(format) as transformers defines it: the current local time, formatted. Tests pass a fixed clock.
using StrftimeNow = std::function<std::string(const std::string& format)>;
Map make_globals(const StrftimeNow& strftime_now);

}  // namespace tune::jinja
