// Python indexes, slices, measures and strips strings by code point; templates hold UTF-8 bytes.
#pragma once

#include <string>

#include "tune/core/utf8.h"

namespace tune::jinja {

using utf8::count_code_points;
using utf8::split_code_points;

// Python's str.isspace() for one code point in UTF-8 (str.strip() and str.split() with no argument use it).
bool is_python_whitespace(const std::string& code_point);

}  // namespace tune::jinja
