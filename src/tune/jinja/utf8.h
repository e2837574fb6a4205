// Python indexes, slices, measures and strips strings by code point; templates hold UTF-8 bytes.
#pragma once

#include <string>
#include <vector>

namespace tune::jinja {

// Each code point of a UTF-8 string as its own (1 to 4 byte) string.
std::vector<std::string> split_code_points(const std::string& text);
size_t count_code_points(const std::string& text);
// Python's str.isspace() for one code point in UTF-8 (str.strip() and str.split() with no argument use it).
bool is_python_whitespace(const std::string& code_point);

}  // namespace tune::jinja
