// Validation of raw values against the Schema (see validate.h). Messages name the key, the value received
// and what to write instead.
#include "tune/config/validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "tune/config/suggest.h"
#include "tune/config/weighted_paths.h"
#include "tune/config/yaml_text.h"

namespace tune::config {

namespace {

namespace fs = std::filesystem;

std::string expected_text(ValueType type) {
  switch (type) {
    case ValueType::boolean:
      return "true or false";
    case ValueType::integer:
      return "an integer";
    case ValueType::real:
      return "a number";
    case ValueType::string:
      return "a string";
    case ValueType::path:
      return "a path";
    case ValueType::string_list:
      return "a list of strings, like [a, b]";
    case ValueType::integer_list:
      return "a list of integers, like [1, 2]";
    case ValueType::weighted_paths:
      return "a path, or a list of paths and {path, weight} mappings";
  }
  return "a value";
}

// yaml-cpp tags plain scalars "?"; quoted ones "!" and explicitly tagged ones (!!str) carry their tag.
bool is_plain(const YAML::Node& scalar) { return scalar.Tag() == "?"; }

std::string received_text(const YAML::Node& node) {
  if (node.IsNull()) return "null";
  if (node.IsMap()) return "a map of nested keys";
  if (node.IsSequence()) {
    std::vector<std::string> elements;
    for (const auto& element : node) elements.push_back(element.IsScalar() ? element.Scalar() : "...");
    return fmt::format("the list [{}]", fmt::join(elements, ", "));
  }
  if (!is_plain(node)) return fmt::format("the quoted string \"{}\"", node.Scalar());
  return fmt::format("'{}'", node.Scalar());
}

// Where a list element was written: its own line and column when it came from a file.
SourceLocation element_location(const SourceLocation& list_location, const YAML::Node& element) {
  if (!list_location.override_text.empty() || list_location.file.empty() || element.Mark().is_null()) {
    return list_location;
  }
  SourceLocation location = list_location;
  location.line = element.Mark().line + 1;
  location.column = element.Mark().column + 1;
  return location;
}

enum class Outcome { value, unset, invalid };

class ValueChecker {
 public:
  ValueChecker(const KeySpec& spec, std::vector<std::string>& problems) : spec_(spec), problems_(problems) {}

  // Sets `text` to the canonical YAML of a valid value; otherwise records why not.
  Outcome check(const YAML::Node& node, const SourceLocation& location, std::string& text) {
    if (node.IsNull()) return check_null(location);
    if (spec_.type == ValueType::weighted_paths) {
      const std::optional<std::string> checked = check_weighted_paths(spec_.key, node, location, problems_);
      if (!checked) return Outcome::invalid;
      text = *checked;
      return Outcome::value;
    }
    if (node.IsMap()) {
      wrong_type(location, node, fmt::format("; {} takes a single value, not nested keys", spec_.key));
      return Outcome::invalid;
    }
    const bool is_list_type = spec_.type == ValueType::string_list || spec_.type == ValueType::integer_list;
    if (is_list_type) return check_list(node, location, text);
    if (node.IsSequence()) {
      wrong_type(location, node, "");
      return Outcome::invalid;
    }
    if (!check_scalar(node, location, text)) return Outcome::invalid;
    return check_choice(node.Scalar(), location) ? Outcome::value : Outcome::invalid;
  }

 private:
  const KeySpec& spec_;
  std::vector<std::string>& problems_;

  void wrong_type(const SourceLocation& location, const YAML::Node& node, const std::string& hint) {
    problems_.push_back(fmt::format("{}: {}: expected {}, got {}{}", location.to_string(), spec_.key,
                                    expected_text(spec_.type), received_text(node), hint));
  }

  Outcome check_null(const SourceLocation& location) {
    // Null means "leave unset", which only makes sense for a key that may stay unset.
    if (!spec_.default_value && !spec_.required) return Outcome::unset;
    const std::string hint = spec_.required
                                 ? "; this key is required, so give it a value"
                                 : fmt::format("; remove the line to use the default ({})", *spec_.default_value);
    problems_.push_back(fmt::format("{}: {}: expected {}, got null{}", location.to_string(), spec_.key,
                                    expected_text(spec_.type), hint));
    return Outcome::invalid;
  }

  bool check_scalar(const YAML::Node& node, const SourceLocation& location, std::string& text) {
    const std::string& scalar = node.Scalar();
    const bool plain = is_plain(node);
    switch (spec_.type) {
      case ValueType::boolean:
        if (plain && (scalar == "true" || scalar == "True" || scalar == "TRUE")) {
          text = "true";
          return true;
        }
        if (plain && (scalar == "false" || scalar == "False" || scalar == "FALSE")) {
          text = "false";
          return true;
        }
        wrong_type(location, node, !plain && (scalar == "true" || scalar == "false") ? "; remove the quotes" : "");
        return false;
      case ValueType::integer: {
        long long value = 0;
        if (plain && parse_integer_text(scalar, value)) {
          text = std::to_string(value);
          return true;
        }
        std::string hint;
        double real = 0;
        if (!plain && parse_integer_text(scalar, value)) {
          hint = "; remove the quotes";
        } else if (plain && std::regex_match(scalar, std::regex(R"([-+]?[0-9]+)"))) {
          hint = "; it is out of the 64-bit range";
        } else if (plain && parse_real_text(scalar, real)) {
          hint = "; write a whole number";
        }
        wrong_type(location, node, hint);
        return false;
      }
      case ValueType::real: {
        double value = 0;
        if (plain && parse_real_text(scalar, value)) {
          text = real_text(value);
          return true;
        }
        wrong_type(location, node, !plain && parse_real_text(scalar, value) ? "; remove the quotes" : "");
        return false;
      }
      case ValueType::string:
        text = string_text(scalar);
        return true;
      case ValueType::path:
        if (scalar.empty()) {
          wrong_type(location, node, "; give a file or directory name");
          return false;
        }
        // Relative to where tune runs, not to the YAML file: the same rule for files and the command line.
        text = string_text(fs::absolute(fs::path(scalar)).lexically_normal().string());
        return true;
      case ValueType::string_list:
      case ValueType::integer_list:
      case ValueType::weighted_paths:
        break;  // handled by check_list and check_weighted_paths
    }
    return false;
  }

  Outcome check_list(const YAML::Node& node, const SourceLocation& location, std::string& text) {
    if (!node.IsSequence()) {
      // A bare scalar is refused rather than wrapped: the user may have meant a different key.
      wrong_type(location, node, fmt::format("; write a list, like [{}]", node.Scalar()));
      return Outcome::invalid;
    }
    const bool integers = spec_.type == ValueType::integer_list;
    std::vector<std::string> element_texts;
    bool all_valid = true;
    for (const YAML::Node& element : node) {
      const SourceLocation where = element_location(location, element);
      long long value = 0;
      const bool valid =
          element.IsScalar() && (integers ? is_plain(element) && parse_integer_text(element.Scalar(), value) : true);
      if (!valid) {
        problems_.push_back(fmt::format("{}: {}: every element must be {}, got {}", where.to_string(), spec_.key,
                                        integers ? "an integer" : "a string", received_text(element)));
        all_valid = false;
        continue;
      }
      if (!check_choice(element.Scalar(), where)) {
        all_valid = false;
        continue;
      }
      element_texts.push_back(integers ? std::to_string(value) : string_text(element.Scalar()));
    }
    if (!all_valid) return Outcome::invalid;
    text = flow_list_text(element_texts);
    return Outcome::value;
  }

  bool check_choice(const std::string& value, const SourceLocation& location) {
    if (spec_.choices.empty()) return true;
    if (std::find(spec_.choices.begin(), spec_.choices.end(), value) != spec_.choices.end()) return true;
    problems_.push_back(fmt::format("{}: {}: '{}' is not one of the choices: {}", location.to_string(), spec_.key,
                                    value, fmt::join(spec_.choices, ", ")));
    return false;
  }
};

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

// Schema keys inside the section `prefix` ("optimizer" -> optimizer.lr, optimizer.eps, ...).
std::vector<std::string> keys_in_section(const Schema& schema, const std::string& prefix) {
  std::vector<std::string> keys;
  for (const KeySpec& spec : schema.keys()) {
    if (starts_with(spec.key, prefix + ".")) keys.push_back(spec.key);
  }
  return keys;
}

// The schema key that `key` lies inside, when a map was given for a key that takes a single value.
const KeySpec* enclosing_scalar_key(const Schema& schema, const std::string& key) {
  for (auto dot = key.rfind('.'); dot != std::string::npos;
       dot = dot == 0 ? std::string::npos : key.rfind('.', dot - 1)) {
    if (const KeySpec* spec = schema.find(key.substr(0, dot))) return spec;
  }
  return nullptr;
}

std::string section_summary(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 4;
  const std::vector<std::string> shown(keys.begin(), keys.begin() + std::min(kShown, keys.size()));
  return fmt::format("{}{}", fmt::join(shown, ", "), keys.size() > kShown ? ", ..." : "");
}

void report_unknown_key(const Schema& schema, const std::string& key, const RawValue& raw,
                        std::vector<std::string>& problems) {
  const std::vector<std::string> nested = keys_in_section(schema, key);
  if (!nested.empty()) {
    problems.push_back(fmt::format(
        "{}: {} is a section with the keys {}, not a single value; got {}; write "
        "nested keys instead, like {}: ...",
        raw.value_location.to_string(), key, section_summary(nested), received_text(raw.node), nested.front()));
    return;
  }
  std::vector<std::string> known;
  for (const KeySpec& spec : schema.keys()) known.push_back(spec.key);
  if (const auto suggestion = nearest_key(key, known)) {
    problems.push_back(
        fmt::format("{}: unknown key '{}'; did you mean '{}'?", raw.key_location.to_string(), key, *suggestion));
  } else {
    problems.push_back(fmt::format("{}: unknown key '{}': this recipe has no such setting; remove it",
                                   raw.key_location.to_string(), key));
  }
}

}  // namespace

std::map<std::string, Config::Entry> validate(const RawConfig& raw, const Schema& schema,
                                              const std::string& recipe_file, std::vector<std::string>& problems) {
  std::map<std::string, Config::Entry> entries;
  // Keys a file settled without a value: null left them unset on purpose, or their value was refused (already
  // reported, so neither a default nor a "missing" problem should stand in for it).
  std::set<std::string> settled_without_value;

  // A map given for a single-value key: one problem for the key, none for the keys nested under it.
  for (const auto& [section, location] : raw.sections) {
    const KeySpec* spec = schema.find(section);
    if (spec == nullptr) continue;
    const bool other_section_reported = enclosing_scalar_key(schema, section) != nullptr;
    if (other_section_reported) continue;
    problems.push_back(fmt::format("{}: {}: expected {}, got a map of nested keys; {} takes a single value",
                                   location.to_string(), section, expected_text(spec->type), section));
  }

  std::vector<std::pair<std::string, const RawValue*>> in_reading_order;
  for (const auto& [key, value] : raw.leaves) in_reading_order.emplace_back(key, &value);
  std::sort(in_reading_order.begin(), in_reading_order.end(),
            [](const auto& a, const auto& b) { return a.second->order < b.second->order; });

  for (const auto& [key, value] : in_reading_order) {
    if (enclosing_scalar_key(schema, key) != nullptr) continue;  // reported with its section above
    const KeySpec* spec = schema.find(key);
    if (spec == nullptr) {
      report_unknown_key(schema, key, *value, problems);
      continue;
    }
    std::string text;
    switch (ValueChecker(*spec, problems).check(value->node, value->value_location, text)) {
      case Outcome::value:
        entries[key] = Config::Entry{text, value->value_location};
        break;
      case Outcome::unset:
      case Outcome::invalid:
        settled_without_value.insert(key);
        break;
    }
  }

  // Sections that brought no values at all ("lora: {}") still have to be known.
  for (const auto& entry : raw.sections) {
    const std::string& section = entry.first;  // not a structured binding: clang < 16 cannot capture those
    const SourceLocation& location = entry.second;
    if (schema.find(section) != nullptr || enclosing_scalar_key(schema, section) != nullptr) continue;
    if (!keys_in_section(schema, section).empty()) continue;
    const bool has_contents = std::any_of(raw.leaves.begin(), raw.leaves.end(),
                                          [&](const auto& leaf) { return starts_with(leaf.first, section + "."); }) ||
                              std::any_of(raw.sections.begin(), raw.sections.end(),
                                          [&](const auto& other) { return starts_with(other.first, section + "."); });
    if (has_contents) continue;
    RawValue empty_section{YAML::Node(YAML::NodeType::Map), location, location, 0};
    report_unknown_key(schema, section, empty_section, problems);
  }

  for (const KeySpec& spec : schema.keys()) {
    if (entries.count(spec.key) != 0 || settled_without_value.count(spec.key) != 0) continue;
    if (spec.required) {
      if (raw.incomplete) continue;  // it may be in the file that could not be read
      problems.push_back(fmt::format("{}: missing required key '{}' ({}); add it to the file or pass {}=VALUE",
                                     recipe_file, spec.key, spec.help, spec.key));
      continue;
    }
    if (!spec.default_value) continue;
    SourceLocation default_location;  // empty file: "default"
    YAML::Node default_node;
    try {
      default_node = YAML::Load(*spec.default_value);
    } catch (const YAML::Exception& e) {
      problems.push_back(fmt::format("default: {}: the schema's default '{}' is not valid YAML: {}", spec.key,
                                     *spec.default_value, e.what()));
      continue;
    }
    std::string text;
    if (ValueChecker(spec, problems).check(default_node, default_location, text) == Outcome::value) {
      entries[spec.key] = Config::Entry{text, default_location};
    }
  }
  return entries;
}

}  // namespace tune::config
