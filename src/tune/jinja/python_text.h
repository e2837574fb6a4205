// How Python prints values: str() for `{{ ... }}` output and the string filter, repr() for items inside a printed
// list or dict, and float's shortest round-trip repr (1.0, 1e-05, 0.30000000000000004).
#pragma once

#include <string>

#include "tune/jinja/value.h"

namespace tune::jinja {

std::string python_str(const Value& value);
std::string python_repr(const Value& value);
std::string python_float_repr(double number);

}  // namespace tune::jinja
