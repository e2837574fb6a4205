// jinja2's builtin filters that chat templates use, with transformers' `tojson` (json.dumps, no HTML escaping).
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "tune/jinja/arguments.h"
#include "tune/jinja/builtins.h"
#include "tune/jinja/json_bridge.h"
#include "tune/jinja/operators.h"
#include "tune/jinja/python_strings.h"
#include "tune/jinja/python_text.h"

namespace tune::jinja {
namespace {

using Filter = std::function<Value(const Value&, const CallArguments&)>;

std::string text_argument(const Value& value, const char* filter) {
  if (!value.is_string()) throw EvaluationError(fmt::format("{}: expected a string argument, got {}", filter, value.type_name()));
  return value.as_string();
}

// A filter that works on str(value) and takes no arguments.
Filter string_filter(const char* name, std::string (*transform)(std::string)) {
  return [name, transform](const Value& value, const CallArguments& call) {
    BoundArguments(call, name, {});
    return Value(transform(python_str(value)));
  };
}

Value tojson(const Value& value, const CallArguments& call) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  const BoundArguments arguments(call, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = arguments.get(0, Value(false)).truthy();
  const Value indent = arguments.get(1, Value());
  if (indent.is_int()) {
    options.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
  } else if (indent.is_string()) {
    options.indent = indent.as_string();
  } else if (!indent.is_none()) {
    throw EvaluationError(fmt::format("tojson: indent must be an int or a string, got {}", indent.type_name()));
  }
  const Value separators = arguments.get(2, Value());
  if (separators.is_list() && separators.as_list().size() == 2) {
    options.item_separator = text_argument(separators.as_list()[0], "tojson");
    options.key_separator = text_argument(separators.as_list()[1], "tojson");
  } else if (!separators.is_none()) {
    throw EvaluationError("tojson: separators must be a pair of strings (item_separator, key_separator)");
  }
  options.sort_keys = arguments.get(3, Value(false)).truthy();
  return Value(to_json_text(value, options));
}

Value default_filter(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "default", {"default_value", "boolean"});
  const bool use_default = value.is_undefined() || (arguments.get(1, Value(false)).truthy() && !value.truthy());
  return use_default ? arguments.get(0, Value("")) : value;
}

Value join(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "join", {"d", "attribute"});
  const std::string separator = python_str(arguments.get(0, Value("")));
  std::string out;
  bool first = true;
  for (const Value& item : iterate(value)) {
    if (!first) out += separator;
    first = false;
    out += python_str(arguments.has(1) ? get_attribute(item, python_str(arguments.get(1))) : item);
  }
  return Value(out);
}

Value first_or_last(const Value& value, const CallArguments& call, bool first) {
  BoundArguments(call, first ? "first" : "last", {});
  const List items = iterate(value);
  if (items.empty()) return Value::undefined(fmt::format("No {} item, sequence was empty.", first ? "first" : "last"));
  return first ? items.front() : items.back();
}

Value trim(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "trim", {"chars"});
  const Value chars = arguments.get(0, Value());
  return Value(python_strip(python_str(value), chars.is_none() ? std::nullopt : std::optional(text_argument(chars, "trim")),
                            StripSide::both));
}

Value replace(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "replace", {"old", "new", "count"});
  const Value count = arguments.get(2, Value());
  return Value(python_replace(python_str(value), python_str(arguments.get(0, Value(""))),
                              python_str(arguments.get(1, Value(""))), count.is_none() ? -1 : count.as_int()));
}

// The item an attribute-or-key path names, as jinja2's make_attrgetter: "a.b" and "0" are allowed.
Value attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    // An index beyond int64 names no item (jinja2: an IndexError, so Undefined); stoll would throw.
    if (numeric && part.size() > 18) return Value::undefined(part);
    current = numeric ? get_item(current, Value(static_cast<int64_t>(std::stoll(part)))) : get_attribute(current, part);
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// select/reject/selectattr/rejectattr: keep the items whose (attribute's) test result equals `keep`.
Value select_items(const Value& value, const CallArguments& call, bool keep, bool by_attribute) {
  CallArguments test_arguments;
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (call.positional.empty()) throw EvaluationError("selectattr/rejectattr need an attribute name");
    attribute = python_str(call.positional[next++]);
  }
  std::string test;
  if (next < call.positional.size()) test = python_str(call.positional[next++]);
  test_arguments.positional.assign(call.positional.begin() + static_cast<std::ptrdiff_t>(next), call.positional.end());
  test_arguments.keyword = call.keyword;
  List kept;
  for (const Value& item : iterate(value)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passes = test.empty() ? subject.truthy() : apply_test(test, subject, test_arguments);
    if (passes == keep) kept.push_back(item);
  }
  return Value(kept);
}

// map('filter', args...) applies a filter to each item; map(attribute='a', default=x) reads an attribute.
Value map_items(const Value& value, const CallArguments& call) {
  List mapped;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [name, argument] : call.keyword) {
    if (name == "attribute") attribute = &argument;
    if (name == "default") fallback = &argument;
  }
  if (attribute) {
    for (const Value& item : iterate(value)) {
      Value result = attribute_path(item, python_str(*attribute));
      mapped.push_back(result.is_undefined() && fallback ? *fallback : result);
    }
    return Value(mapped);
  }
  if (call.positional.empty()) throw EvaluationError("map() needs a filter name or attribute=");
  const std::string filter = python_str(call.positional[0]);
  CallArguments filter_arguments{{call.positional.begin() + 1, call.positional.end()}, call.keyword};
  for (const Value& item : iterate(value)) mapped.push_back(apply_filter(filter, item, filter_arguments));
  return Value(mapped);
}

Value items(const Value& value, const CallArguments& call) {
  BoundArguments(call, "items", {});
  if (value.is_undefined()) return Value(List{});
  if (!value.is_map()) throw EvaluationError(fmt::format("items: can only get items from a mapping, got {}", value.type_name()));
  return *call_method(value, "items", {});
}

// sort and dictsort compare strings case-insensitively unless case_sensitive is set, as jinja2 does.
Value sort_key(const Value& value, bool case_sensitive) {
  return value.is_string() && !case_sensitive ? Value(python_lower(value.as_string())) : value;
}

Value sort(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = arguments.get(0, Value(false)).truthy();
  const bool case_sensitive = arguments.get(1, Value(false)).truthy();
  List sorted = iterate(value);
  auto key = [&](const Value& item) {
    return sort_key(arguments.has(2) ? attribute_path(item, python_str(arguments.get(2))) : item, case_sensitive);
  };
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& a, const Value& b) {
    return reverse ? key(b).less_than(key(a)) : key(a).less_than(key(b));
  });
  return Value(sorted);
}

Value dictsort(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "dictsort", {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = arguments.get(0, Value(false)).truthy();
  const bool by_value = python_str(arguments.get(1, Value("key"))) == "value";
  const bool reverse = arguments.get(2, Value(false)).truthy();
  List pairs = items(value, {}).as_list();
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const Value& left = a.as_list()[by_value ? 1 : 0];
    const Value& right = b.as_list()[by_value ? 1 : 0];
    return reverse ? sort_key(right, case_sensitive).less_than(sort_key(left, case_sensitive))
                   : sort_key(left, case_sensitive).less_than(sort_key(right, case_sensitive));
  });
  return Value(pairs);
}

Value reverse(const Value& value, const CallArguments& call) {
  BoundArguments(call, "reverse", {});
  if (value.is_string()) return slice(value, std::nullopt, std::nullopt, -1);
  List items = iterate(value);
  std::reverse(items.begin(), items.end());
  return Value(items);
}

Value unique(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "unique", {"case_sensitive", "attribute"});
  const bool case_sensitive = arguments.get(0, Value(false)).truthy();
  List seen_keys;
  List kept;
  for (const Value& item : iterate(value)) {
    const Value key = sort_key(arguments.has(1) ? attribute_path(item, python_str(arguments.get(1))) : item, case_sensitive);
    if (std::find(seen_keys.begin(), seen_keys.end(), key) != seen_keys.end()) continue;
    seen_keys.push_back(key);
    kept.push_back(item);
  }
  return Value(kept);
}

Value to_int(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "int", {"default", "base"});
  if (value.is_int() || value.is_bool()) return Value(value.as_int());
  if (value.is_float()) return Value(static_cast<int64_t>(value.as_float()));
  if (value.is_string()) {
    try {
      size_t used = 0;
      const std::string text = python_strip(value.as_string(), std::nullopt, StripSide::both);
      const int64_t parsed = std::stoll(text, &used, 10);
      if (used == text.size()) return Value(parsed);
      return Value(static_cast<int64_t>(std::stod(text)));
    } catch (const std::exception&) {
    }
  }
  return arguments.get(0, Value(0));
}

Value to_float(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "float", {"default"});
  if (value.is_number()) return Value(value.as_float());
  if (value.is_string()) {
    try {
      return Value(std::stod(value.as_string()));
    } catch (const std::exception&) {
    }
  }
  return arguments.get(0, Value(0.0));
}

Value round_filter(const Value& value, const CallArguments& call) {
  const BoundArguments arguments(call, "round", {"precision", "method"});
  const int64_t precision = arguments.get(0, Value(0)).as_int();
  const std::string method = python_str(arguments.get(1, Value("common")));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = value.as_float() * scale;
  // Python's round() rounds halves to even: round(2.5) == 2.0.
  double rounded = method == "ceil" ? std::ceil(scaled) : method == "floor" ? std::floor(scaled) : std::nearbyint(scaled);
  return Value(rounded / scale);
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = [] {
    std::map<std::string, Filter> f;
    f["tojson"] = tojson;
    f["trim"] = trim;
    f["default"] = f["d"] = default_filter;
    f["join"] = join;
    f["first"] = [](const Value& v, const CallArguments& c) { return first_or_last(v, c, true); };
    f["last"] = [](const Value& v, const CallArguments& c) { return first_or_last(v, c, false); };
    f["length"] = f["count"] = [](const Value& v, const CallArguments& c) {
      BoundArguments(c, "length", {});
      return Value(length_of(v));
    };
    f["upper"] = string_filter("upper", python_upper);
    f["lower"] = string_filter("lower", python_lower);
    f["title"] = string_filter("title", [](std::string s) { return python_title(s); });
    f["capitalize"] = string_filter("capitalize", [](std::string s) { return python_capitalize(s); });
    // Without autoescaping, a Markup string prints as its text.
    f["string"] = f["safe"] = string_filter("string", [](std::string s) { return s; });
    f["replace"] = replace;
    f["items"] = items;
    f["dictsort"] = dictsort;
    f["list"] = [](const Value& v, const CallArguments& c) {
      BoundArguments(c, "list", {});
      return Value(iterate(v));
    };
    f["select"] = [](const Value& v, const CallArguments& c) { return select_items(v, c, true, false); };
    f["reject"] = [](const Value& v, const CallArguments& c) { return select_items(v, c, false, false); };
    f["selectattr"] = [](const Value& v, const CallArguments& c) { return select_items(v, c, true, true); };
    f["rejectattr"] = [](const Value& v, const CallArguments& c) { return select_items(v, c, false, true); };
    f["map"] = map_items;
    f["sort"] = sort;
    f["reverse"] = reverse;
    f["unique"] = unique;
    f["int"] = to_int;
    f["float"] = to_float;
    f["round"] = round_filter;
    f["abs"] = [](const Value& v, const CallArguments& c) {
      BoundArguments(c, "abs", {});
      if (!v.is_number()) throw EvaluationError(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
      return v.is_float() ? Value(std::fabs(v.as_float())) : Value(static_cast<int64_t>(std::llabs(v.as_int())));
    };
    return f;
  }();
  return table;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& value, const CallArguments& arguments) {
  const auto found = filters().find(name);
  if (found == filters().end()) throw EvaluationError(fmt::format("no filter named '{}'", name));
  return found->second(value, arguments);
}

}  // namespace tune::jinja
