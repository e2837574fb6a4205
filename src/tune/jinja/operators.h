// Python's operators on template values: arithmetic, `~`, comparisons and `in`, plus the item, attribute and
// slice access and iteration that `x[i]`, `x.name`, `x[a:b:c]` and `for` use.
#pragma once

#include <optional>
#include <string>

#include "tune/jinja/ast.h"
#include "tune/jinja/value.h"

namespace tune::jinja {

// Every operator except and/or, which short-circuit in the renderer.
Value apply_binary(BinaryOperator op, const Value& left, const Value& right);
Value apply_unary(UnaryOperator op, const Value& operand);

// `object[key]`: a dict key, a list or string index (negative from the end); missing gives undefined.
Value get_item(const Value& object, const Value& key);
// `object.name`: a dict key; missing gives undefined. Undefined objects raise, as jinja2's default Undefined does.
Value get_attribute(const Value& object, const std::string& name);
// Python's slice of a list or string, with any of start/stop/step left out.
Value slice(const Value& object, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step);
// What `for x in value` visits: a list's items, a dict's keys, a string's characters; undefined is empty.
List iterate(const Value& value);
// Python's len() (undefined has length 0, as in jinja2).
int64_t length_of(const Value& value);

}  // namespace tune::jinja
