// Config: loading (read -> validate -> typed entries), typed getters, and writing the resolved config back as YAML.
#include "tune/config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "tune/config/raw_config.h"
#include "tune/config/validate.h"
#include "tune/config/weighted_paths.h"
#include "tune/config/yaml_text.h"

namespace tune::config {

namespace {

std::string join_lines(const std::vector<std::string>& lines) { return fmt::format("{}", fmt::join(lines, "\n")); }

// The getter that reads keys of `type`, named in messages to callers that used the wrong one.
const char* getter_for(ValueType type) {
  switch (type) {
    case ValueType::boolean:
      return "get_bool";
    case ValueType::integer:
      return "get_int";
    case ValueType::real:
      return "get_real";
    case ValueType::string:
    case ValueType::path:
      return "get_string";
    case ValueType::string_list:
      return "get_strings";
    case ValueType::integer_list:
      return "get_ints";
    case ValueType::weighted_paths:
      return "get_weighted_paths";
  }
  return "?";
}

}  // namespace

std::string SourceLocation::to_string() const {
  if (!override_text.empty()) return fmt::format("command line ({})", override_text);
  if (file.empty()) return "default";
  if (line <= 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
}

ConfigError::ConfigError(const std::vector<std::string>& problems)
    : UsageError(join_lines(problems)), problems_(problems) {}

namespace {

// The parsed value of a set key whose schema type is one of `accepted`, or a UsageError saying which getter fits.
YAML::Node typed_value(const Config& config, const std::string& key, std::initializer_list<ValueType> accepted,
                       const char* getter) {
  const KeySpec* spec = config.schema.find(key);
  if (spec == nullptr) {
    throw UsageError(
        fmt::format("config: {}(\"{}\"): the key is not in this recipe's schema; add it to the schema", getter, key));
  }
  if (std::find(accepted.begin(), accepted.end(), spec->type) == accepted.end()) {
    throw UsageError(fmt::format("config: {}(\"{}\"): the key holds another type of value; read it with {}", getter,
                                 key, getter_for(spec->type)));
  }
  const auto entry = config.entries.find(key);
  if (entry == config.entries.end()) {
    throw UsageError(fmt::format("config: {}(\"{}\"): the key is not set and has no default; check has(\"{}\") first",
                                 getter, key, key));
  }
  try {
    return YAML::Load(entry->second.yaml);
  } catch (const YAML::Exception& e) {
    // Only possible when someone edited `entries` by hand; load() writes canonical text.
    throw UsageError(
        fmt::format("config: {}(\"{}\"): stored text '{}' is not YAML: {}", getter, key, entry->second.yaml, e.what()));
  }
}

// Numbers were written canonically by validate(); a failure means `entries` was edited by hand.
long long integer_of(const std::string& key, const std::string& text) {
  long long value = 0;
  if (!parse_integer_text(text, value)) {
    throw UsageError(fmt::format("config: {}: stored text '{}' is not an integer", key, text));
  }
  return value;
}

double real_of(const std::string& key, const std::string& text) {
  double value = 0;
  if (!parse_real_text(text, value)) {
    throw UsageError(fmt::format("config: {}: stored text '{}' is not a number", key, text));
  }
  return value;
}

}  // namespace

bool Config::get_bool(const std::string& key) const {
  return typed_value(*this, key, {ValueType::boolean}, "get_bool").Scalar() == "true";
}

long long Config::get_int(const std::string& key) const {
  return integer_of(key, typed_value(*this, key, {ValueType::integer}, "get_int").Scalar());
}

double Config::get_real(const std::string& key) const {
  return real_of(key, typed_value(*this, key, {ValueType::real}, "get_real").Scalar());
}

std::string Config::get_string(const std::string& key) const {
  return typed_value(*this, key, {ValueType::string, ValueType::path}, "get_string").Scalar();
}

void Config::set_string(const std::string& key, const std::string& value, const std::string& origin) {
  (void)typed_value(*this, key, {ValueType::string}, "set_string");  // a string key of the schema, set
  YAML::Emitter emitter;
  emitter << YAML::DoubleQuoted << value;  // any text reads back as itself
  Entry& entry = entries[key];
  entry.yaml = emitter.c_str();
  entry.location = SourceLocation{};
  entry.location.file = "command line";
  entry.location.override_text = origin;
}

std::vector<std::string> Config::get_strings(const std::string& key) const {
  std::vector<std::string> values;
  for (const auto& element : typed_value(*this, key, {ValueType::string_list}, "get_strings")) {
    values.push_back(element.Scalar());
  }
  return values;
}

std::vector<long long> Config::get_ints(const std::string& key) const {
  std::vector<long long> values;
  for (const auto& element : typed_value(*this, key, {ValueType::integer_list}, "get_ints")) {
    values.push_back(integer_of(key, element.Scalar()));
  }
  return values;
}

std::vector<WeightedPath> Config::get_weighted_paths(const std::string& key) const {
  return weighted_paths_of(typed_value(*this, key, {ValueType::weighted_paths}, "get_weighted_paths"));
}

bool Config::has(const std::string& key) const { return entries.count(key) != 0; }

SourceLocation Config::where(const std::string& key) const {
  const auto entry = entries.find(key);
  return entry == entries.end() ? SourceLocation{} : entry->second.location;
}

void Config::fail(const std::string& key, const std::string& message) const {
  SourceLocation location = where(key);
  // A default or unset key has no line to point at; the recipe file is where the user can change it.
  if (location.file.empty() && !recipe_file.empty()) location.file = recipe_file;
  throw ConfigError({fmt::format("{}: {} {}", location.to_string(), key, message)});
}

namespace {

// Keys in schema order, grouped by their dotted parts, so "a.x", "b", "a.y" print as one block "a:".
struct YamlTree {
  std::string value;  // canonical YAML text; empty for a section
  // Two vectors rather than one of pair<name, YamlTree>: a vector of the incomplete YamlTree is allowed, but clang
  // (14) refuses to instantiate a pair holding one.
  std::vector<std::string> names;
  std::vector<YamlTree> subtrees;

  YamlTree& child(const std::string& name) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return subtrees[i];
    }
    names.push_back(name);
    return subtrees.emplace_back();
  }

  void write(std::string& out, int depth) const {
    for (size_t i = 0; i < names.size(); ++i) {
      const YamlTree& subtree = subtrees[i];
      out += std::string(2 * depth, ' ') + string_text(names[i]) + ":";
      if (subtree.names.empty()) {
        out += " " + subtree.value + "\n";
      } else {
        out += "\n";
        subtree.write(out, depth + 1);
      }
    }
  }
};

}  // namespace

std::string Config::to_yaml() const {
  YamlTree root;
  for (const KeySpec& spec : schema.keys()) {
    const auto entry = entries.find(spec.key);
    if (entry == entries.end()) continue;
    YamlTree* node = &root;
    std::size_t start = 0;
    for (std::size_t dot = spec.key.find('.'); dot != std::string::npos; dot = spec.key.find('.', start)) {
      node = &node->child(spec.key.substr(start, dot - start));
      start = dot + 1;
    }
    node->child(spec.key.substr(start)).value = entry->second.yaml;
  }
  std::string out;
  root.write(out, 0);
  return out;
}

Config load(const std::filesystem::path& file, const std::vector<std::string>& overrides, const Schema& schema) {
  RawConfig raw = read_raw_config(file, overrides);
  std::vector<std::string> problems = std::move(raw.problems);
  std::map<std::string, Config::Entry> entries = validate(raw, schema, file.string(), problems);
  if (!problems.empty()) throw ConfigError(problems);
  Config config;
  config.entries = std::move(entries);
  config.schema = schema;
  config.recipe_file = file.string();
  return config;
}

Config load_overrides(const std::vector<std::string>& overrides, const Schema& schema, const std::string& origin) {
  RawConfig raw = read_raw_overrides(overrides);
  std::vector<std::string> problems = std::move(raw.problems);
  std::map<std::string, Config::Entry> entries = validate(raw, schema, origin, problems);
  if (!problems.empty()) throw ConfigError(problems);
  Config config;
  config.entries = std::move(entries);
  config.schema = schema;
  config.recipe_file = origin;
  return config;
}

RecipeName peek_recipe_name(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  const RawConfig raw = read_raw_config(file, overrides);
  if (!raw.problems.empty()) throw ConfigError(raw.problems);
  const auto recipe = raw.leaves.find("recipe");
  if (recipe == raw.leaves.end()) {
    throw ConfigError(
        {fmt::format("{}: no `recipe:` key, so it is not clear which recipe this file is for; add a "
                     "line like `recipe: sft` (tune ls lists the recipes)",
                     file.string())});
  }
  const YAML::Node& value = recipe->second.node;
  if (!value.IsScalar() || value.Scalar().empty()) {
    throw ConfigError(
        {fmt::format("{}: recipe: expected a recipe name like sft, got {}", recipe->second.value_location.to_string(),
                     value.IsNull()       ? "null"
                     : value.IsSequence() ? "a list"
                                          : "an empty string")});
  }
  return RecipeName{value.Scalar(), recipe->second.value_location};
}

}  // namespace tune::config
