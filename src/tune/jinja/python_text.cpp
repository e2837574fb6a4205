// Python's str() and repr() for template values.
#include "tune/jinja/python_text.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace tune::jinja {
namespace {

// Python's repr of a str: single quotes unless the text has a single quote and no double quote.
std::string string_repr(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;  // non-ASCII text is printable in Python 3 and kept as is
    }
  }
  out += quote;
  return out;
}

std::string repr_at(const Value& value, int depth);

std::string map_repr(const Map& map, int depth) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : map.entries()) {
    if (!first) out += ", ";
    first = false;
    out += string_repr(key) + ": " + repr_at(value, depth + 1);
  }
  return out + "}";
}

// A namespace can hold itself (`{% set ns.me = ns %}`), which Python's repr() gives up on with a RecursionError:
// so does this, at a depth no real value reaches, rather than recurse until the stack overflows.
constexpr int kMaxReprDepth = 512;

std::string repr_at(const Value& value, int depth) {
  if (depth > kMaxReprDepth) {
    throw EvaluationError("maximum recursion depth exceeded while getting the repr of an object");
  }
  switch (value.kind()) {
    case Value::Kind::list: {
      const List& items = value.as_list();
      std::string out = value.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + repr_at(items[i], depth + 1);
      if (value.is_tuple()) return out + (items.size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::map:
      return value.is_namespace() ? "<Namespace " + map_repr(value.as_map(), depth) + ">"
                                  : map_repr(value.as_map(), depth);
    default:
      return python_repr(value);
  }
}

}  // namespace

std::string python_float_repr(double number) {
  if (std::isnan(number)) return "nan";
  if (std::isinf(number)) return number > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip, in scientific form "d.ddde±XX"; Python then prints them in fixed
  // notation when the exponent is in [-4, 16), as repr() does.
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, number, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  const size_t e = scientific.find('e');
  std::string mantissa = scientific.substr(0, e);
  const int exponent = std::atoi(scientific.c_str() + e + 1);
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;

  if (exponent >= -4 && exponent < 16) {
    std::string fixed;
    if (exponent < 0) {
      fixed = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else {
      const size_t integer_digits = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= integer_digits) {
        fixed = digits + std::string(integer_digits - digits.size(), '0') + ".0";
      } else {
        fixed = digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
      }
    }
    return sign + fixed;
  }
  std::string out = sign + digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
}

std::string python_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::string:
      return value.as_string();
    default:
      return python_repr(value);
  }
}

std::string python_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(value.as_int());
    case Value::Kind::floating:
      return python_float_repr(value.as_float());
    case Value::Kind::string:
      return string_repr(value.as_string());
    case Value::Kind::list:
    case Value::Kind::map:
      return repr_at(value, 0);
    case Value::Kind::function:
      return "<function " + value.name() + ">";
  }
  return "";
}

}  // namespace tune::jinja
