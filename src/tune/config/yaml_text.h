// Canonical YAML text for config values: the one spelling stored in Config::Entry and written by to_yaml(),
// chosen so that reading it back gives the same value (strings that look like numbers or booleans are quoted).
#pragma once

#include <string>
#include <vector>

namespace tune::config {

// Shortest text that reads back as the same double; always has a '.' or an exponent so it reads as a real.
std::string real_text(double value);

// The string as a YAML scalar: plain when that reads back as the same string, else double-quoted.
std::string string_text(const std::string& value);

// A flow sequence "[a, b]" of already formatted element texts.
std::string flow_list_text(const std::vector<std::string>& element_texts);

// Reads a plain decimal integer ("-3", "+7"); false for anything else or out of the 64-bit range.
bool parse_integer_text(const std::string& text, long long& value);

// Reads a decimal real ("2", "0.5", "1e-4", ".5"); false for anything else (including inf and nan) or out of range.
// Locale-independent, unlike std::stod.
bool parse_real_text(const std::string& text, double& value);

// A YAML 1.1 or 1.2 reader would take this plain scalar for a boolean or null (true, no, on, ~, null, ...).
bool looks_like_boolean_or_null(const std::string& text);

// A YAML reader would take this plain scalar for a number (12, -3.5, 1e-4, .inf, 0x1f, ...).
bool looks_like_number(const std::string& text);

}  // namespace tune::config
