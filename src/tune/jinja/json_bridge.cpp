// JSON in and out, matching Python's json module byte for byte.
#include "tune/jinja/json_bridge.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tune/jinja/python_text.h"

namespace tune::jinja {
namespace {

template <typename Json>
Value convert(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value();
    case nlohmann::json::value_t::boolean:
      return Value(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value(json.template get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      for (const auto& item : json) items.push_back(convert(item));
      return Value(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Map map;
      for (const auto& [key, item] : json.items()) map.set(key, convert(item));
      return Value(std::move(map));
    }
    default:
      throw EvaluationError("cannot use binary or discarded JSON data as a template value");
  }
}

// Decodes the UTF-8 sequence starting at text[i] and advances i past it.
uint32_t decode_code_point(const std::string& text, size_t& i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const int length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  uint32_t code = length == 1 ? lead : lead & (0x3F >> (length - 1));
  for (int k = 1; k < length && i + k < text.size(); ++k) code = (code << 6) | (text[i + k] & 0x3F);
  i += length;
  return code;
}

// json.dumps escapes the quote, the backslash and control characters, and with ensure_ascii every non-ASCII
// character too.
std::string json_string(const std::string& text, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (ensure_ascii && static_cast<unsigned char>(c) >= 0x80) {
      const uint32_t code = decode_code_point(text, i);
      if (code >= 0x10000) {
        const uint32_t offset = code - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (offset >> 10), 0xDC00 + (offset & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", code);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options)
      : options_(options),
        item_separator_(options.item_separator.value_or(options.indent ? "," : ", ")) {}

  void write(const Value& value, int depth) {
    switch (value.kind()) {
      case Value::Kind::none:
        out_ += "null";
        return;
      case Value::Kind::boolean:
        out_ += value.as_bool() ? "true" : "false";
        return;
      case Value::Kind::integer:
        out_ += std::to_string(value.as_int());
        return;
      case Value::Kind::floating:
        write_float(value.as_float());
        return;
      case Value::Kind::string:
        out_ += json_string(value.as_string(), options_.ensure_ascii);
        return;
      case Value::Kind::list:
        write_list(value.as_list(), depth);
        return;
      case Value::Kind::map:
        if (!value.is_namespace()) {
          write_map(value.as_map(), depth);
          return;
        }
        [[fallthrough]];
      default:
        throw EvaluationError(fmt::format("Object of type {} is not JSON serializable", value.type_name()));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void write_float(double number) {
    if (std::isnan(number)) {
      out_ += "NaN";
    } else if (std::isinf(number)) {
      out_ += number > 0 ? "Infinity" : "-Infinity";
    } else {
      out_ += python_float_repr(number);
    }
  }

  // Before each item: the separator after the previous one, then a newline and indent when indenting.
  void begin_item(bool first, int depth) {
    if (!first) out_ += item_separator_;
    new_line(depth);
  }

  void new_line(int depth) {
    if (!options_.indent) return;
    out_ += '\n';
    for (int i = 0; i < depth; ++i) out_ += *options_.indent;
  }

  void write_list(const List& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      begin_item(i == 0, depth + 1);
      write(items[i], depth + 1);
    }
    new_line(depth);
    out_ += ']';
  }

  void write_map(const Map& map, int depth) {
    if (map.size() == 0) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : map.entries()) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
    }
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      begin_item(i == 0, depth + 1);
      out_ += json_string(entries[i]->first, options_.ensure_ascii) + options_.key_separator;
      write(entries[i]->second, depth + 1);
    }
    new_line(depth);
    out_ += '}';
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string out_;
};

}  // namespace

Value from_json(const nlohmann::ordered_json& json) { return convert(json); }
Value from_json(const nlohmann::json& json) { return convert(json); }

std::string to_json_text(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(value, 0);
  return writer.take();
}

}  // namespace tune::jinja
