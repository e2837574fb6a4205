// Python methods a template may call on strings and dicts. The sandbox transformers uses is immutable, so only
// methods that do not change their object exist (no list.append, no dict.update).
#include <fmt/format.h>

#include "tune/jinja/arguments.h"
#include "tune/jinja/builtins.h"
#include "tune/jinja/python_strings.h"
#include "tune/jinja/utf8.h"

namespace tune::jinja {
namespace {

std::optional<std::string> optional_string(const Value& value, const char* method) {
  if (value.is_none() || value.is_undefined()) return std::nullopt;
  if (!value.is_string()) throw EvaluationError(fmt::format("{}() argument must be str or None, not {}", method, value.type_name()));
  return value.as_string();
}

std::string string_argument(const Value& value, const char* method) {
  if (!value.is_string()) throw EvaluationError(fmt::format("{}() argument must be str, not {}", method, value.type_name()));
  return value.as_string();
}

int64_t int_argument(const Value& value, int64_t fallback) {
  if (value.is_undefined() || value.is_none()) return fallback;
  if (!value.is_int() && !value.is_bool()) throw EvaluationError(fmt::format("an integer is required, not {}", value.type_name()));
  return value.as_int();
}

Value string_list(const std::vector<std::string>& pieces) {
  List list;
  for (const std::string& piece : pieces) list.emplace_back(piece);
  return Value(list);
}

// startswith/endswith take one prefix or a tuple (here a list) of them.
bool affix_matches(const std::string& text, const Value& affixes, bool at_start, const char* method) {
  List candidates = affixes.is_list() ? affixes.as_list() : List{affixes};
  for (const Value& candidate : candidates) {
    const std::string affix = string_argument(candidate, method);
    if (affix.size() > text.size()) continue;
    if (at_start ? text.compare(0, affix.size(), affix) == 0
                 : text.compare(text.size() - affix.size(), affix.size(), affix) == 0)
      return true;
  }
  return false;
}

std::optional<Value> string_method(const std::string& text, const std::string& name, const CallArguments& call) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const BoundArguments arguments(call, name, {"chars"});
    const StripSide side = name == "strip" ? StripSide::both : name == "lstrip" ? StripSide::left : StripSide::right;
    return Value(python_strip(text, optional_string(arguments.get(0), name.c_str()), side));
  }
  if (name == "split" || name == "rsplit") {
    const BoundArguments arguments(call, name, {"sep", "maxsplit"});
    const auto separator = optional_string(arguments.get(0), name.c_str());
    if (separator && separator->empty()) throw EvaluationError("empty separator");
    const int64_t maxsplit = int_argument(arguments.get(1), -1);
    return string_list(name == "split" ? python_split(text, separator, maxsplit) : python_rsplit(text, separator, maxsplit));
  }
  if (name == "startswith" || name == "endswith") {
    const BoundArguments arguments(call, name, {"prefix"});
    return Value(affix_matches(text, arguments.get(0, Value()), name == "startswith", name.c_str()));
  }
  if (name == "replace") {
    const BoundArguments arguments(call, name, {"old", "new", "count"});
    return Value(python_replace(text, string_argument(arguments.get(0, Value()), "replace"),
                                string_argument(arguments.get(1, Value()), "replace"), int_argument(arguments.get(2), -1)));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    BoundArguments(call, name, {});
    if (name == "upper") return Value(python_upper(text));
    if (name == "lower") return Value(python_lower(text));
    if (name == "title") return Value(python_title(text));
    return Value(python_capitalize(text));
  }
  if (name == "find" || name == "count") {
    const BoundArguments arguments(call, name, {"sub"});
    const std::string needle = string_argument(arguments.get(0, Value()), name.c_str());
    if (name == "find") {
      const size_t found = text.find(needle);
      if (found == std::string::npos) return Value(-1);
      return Value(static_cast<int64_t>(count_code_points(text.substr(0, found))));  // Python counts code points
    }
    if (needle.empty()) throw EvaluationError("count() of an empty string is not supported");
    int64_t occurrences = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++occurrences;
    return Value(occurrences);
  }
  if (name == "join") {
    const BoundArguments arguments(call, name, {"iterable"});
    std::string out;
    const Value items = arguments.get(0, Value());
    if (!items.is_list()) throw EvaluationError("join() argument must be a list");
    for (size_t i = 0; i < items.as_list().size(); ++i) {
      if (i) out += text;
      out += string_argument(items.as_list()[i], "join");
    }
    return Value(out);
  }
  return std::nullopt;
}

Value pairs(const Map& map) {
  List items;
  for (const auto& [key, value] : map.entries()) items.push_back(Value::tuple(List{Value(key), value}));
  return Value(items);
}

std::optional<Value> map_method(const Map& map, const std::string& name, const CallArguments& call) {
  if (name == "items" || name == "keys" || name == "values") {
    BoundArguments(call, name, {});
    if (name == "items") return pairs(map);
    List out;
    for (const auto& [key, value] : map.entries()) out.push_back(name == "keys" ? Value(key) : value);
    return Value(out);
  }
  if (name == "get") {
    const BoundArguments arguments(call, name, {"key", "default"});
    const Value key = arguments.get(0, Value());
    const Value* found = key.is_string() ? map.find(key.as_string()) : nullptr;
    return found ? *found : arguments.get(1, Value());
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> call_method(const Value& object, const std::string& name, const CallArguments& arguments) {
  if (object.is_string()) return string_method(object.as_string(), name, arguments);
  if (object.is_map() && !object.is_namespace()) return map_method(object.as_map(), name, arguments);
  return std::nullopt;
}

}  // namespace tune::jinja
