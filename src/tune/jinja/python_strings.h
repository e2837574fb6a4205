// Python's str methods on UTF-8 text, shared by the method calls (`s.strip()`) and the filters (`s|trim`).
// Case mapping (upper, lower, title, capitalize) covers ASCII letters only.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tune::jinja {

enum class StripSide { both, left, right };
// Without `characters`, strips Python whitespace (Unicode-aware, as str.strip()).
std::string python_strip(const std::string& text, const std::optional<std::string>& characters, StripSide side);
// Without `separator`, splits on runs of whitespace and drops empty pieces, as str.split(). maxsplit < 0: no limit.
std::vector<std::string> python_split(const std::string& text, const std::optional<std::string>& separator,
                                      int64_t maxsplit);
// str.rsplit: the same, counting maxsplit from the right.
std::vector<std::string> python_rsplit(const std::string& text, const std::optional<std::string>& separator,
                                       int64_t maxsplit);
std::string python_replace(const std::string& text, const std::string& old, const std::string& replacement,
                           int64_t count);
std::string python_upper(std::string text);
std::string python_lower(std::string text);
std::string python_title(const std::string& text);
std::string python_capitalize(const std::string& text);

}  // namespace tune::jinja
