// The typed schema a recipe declares: every accepted key, its type, default and help text.
// Keys are dotted paths ("optimizer.lr"); YAML nesting and dotted keys are the same thing.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tune::config {

enum class ValueType {
  boolean,
  integer,
  real,        // accepts integers too
  string,
  path,        // a string resolved to an absolute path (relative to the current directory) when loaded
  string_list,
  integer_list,
  weighted_paths,  // a path, or a list of paths and {path: P, weight: W} mappings (weighted_paths.h)
};

struct KeySpec {
  std::string key;
  ValueType type = ValueType::string;
  std::optional<std::string> default_value;  // YAML text of the default; nullopt = no default
  bool required = false;                     // must be set by a file or an override
  std::vector<std::string> choices;          // non-empty: an enum, value must be one of these
  std::string help;
};

class Schema {
 public:
  Schema& add(KeySpec spec);  // a duplicate key replaces the earlier spec (recipes refine common keys)

  Schema& boolean(const std::string& key, bool default_value, const std::string& help);
  Schema& integer(const std::string& key, long long default_value, const std::string& help);
  Schema& real(const std::string& key, double default_value, const std::string& help);
  Schema& string(const std::string& key, const std::string& default_value, const std::string& help);
  Schema& choice(const std::string& key, std::vector<std::string> choices, const std::string& default_value,
                 const std::string& help);
  Schema& path(const std::string& key, const std::string& help);  // optional, no default
  Schema& required_path(const std::string& key, const std::string& help);
  Schema& optional_string(const std::string& key, const std::string& help);  // no default, may stay unset
  Schema& string_list(const std::string& key, std::vector<std::string> default_value, const std::string& help);
  Schema& required_weighted_paths(const std::string& key, const std::string& help);

  const KeySpec* find(const std::string& key) const;
  const std::vector<KeySpec>& keys() const { return specs_; }

 private:
  std::vector<KeySpec> specs_;
};

}  // namespace tune::config
