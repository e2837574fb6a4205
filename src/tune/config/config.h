// Loading a recipe: YAML with `include:`, dotted key=value overrides, validation against a Schema.
// This is the only layer that sees YAML; everything above reads typed values from a Config.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tune/config/schema.h"
#include "tune/core/error.h"

namespace tune::config {

// Where a value came from: "recipes/sft-tiny.yaml:12:5", "configs/model/llama-tiny.yaml:3:1",
// "command line (model.layers=4)" or "default".
struct SourceLocation {
  std::string file;           // empty for defaults (and for keys that are not set); "command line" for overrides
  int line = 0;               // 1-based; 0 when unknown
  int column = 0;             // 1-based
  std::string override_text;  // for overrides: the "model.layers=4" argument as given
  std::string to_string() const;
};

// All problems of a config, reported together (one per line, each starting with its file:line:col).
class ConfigError : public UsageError {
 public:
  explicit ConfigError(const std::vector<std::string>& problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// One file of a weighted_paths key (weighted_paths.h): an absolute path and its weight (1 when not given).
struct WeightedPath {
  std::string path;
  double weight = 1.0;
};

class Config {
 public:
  bool get_bool(const std::string& key) const;
  long long get_int(const std::string& key) const;
  double get_real(const std::string& key) const;
  std::string get_string(const std::string& key) const;  // also for path keys (absolute)
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<long long> get_ints(const std::string& key) const;
  std::vector<WeightedPath> get_weighted_paths(const std::string& key) const;  // a single path gives one entry

  // The getters throw UsageError (a programming error in the caller) for a key that is not in the schema,
  // not set (check has() first for keys without a default), or of another type.

  // Replaces a string key's value after loading (the run directory the command line chose, so that the run's
  // config.yaml records it); `origin` becomes its location ("--output-dir").
  void set_string(const std::string& key, const std::string& value, const std::string& origin);

  bool has(const std::string& key) const;  // true when set by a file, an override, or a default
  // Where the key's value came from; an empty location (file "") for defaults and for keys that are not set.
  SourceLocation where(const std::string& key) const;

  // A ConfigError "<where>: <key> <message>", for semantic checks recipes make after loading:
  // fail("lora.rank", "must be > 0 when lora.enabled is true"). A key without a location names the recipe file.
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  // The fully resolved config (defaults filled in, includes and overrides applied) as nested YAML,
  // keys in schema order. Loading this text again with no overrides gives the same Config.
  std::string to_yaml() const;

  // Implementation detail, filled by load(): key -> (canonical YAML text of the value, location).
  struct Entry {
    std::string yaml;  // scalar text, or flow sequence "[a, b]" for lists
    SourceLocation location;
  };
  std::map<std::string, Entry> entries;
  Schema schema;
  std::string recipe_file;  // the file load() read, named by fail() for keys that have no location
};

// Reads `file` (following `include:` entries, relative to the including file or else to the shipped configs/
// directory; later keys win), applies `overrides` ("a.b=value", value parsed as YAML), validates against
// `schema`: unknown keys (with a "did you mean" suggestion), wrong types, bad enum values and missing required
// keys each produce a problem with its file:line:col; all are thrown together as one ConfigError. The `include`
// key itself is consumed by loading; every other key (including `recipe`) must be in the schema.
Config load(const std::filesystem::path& file, const std::vector<std::string>& overrides, const Schema& schema);

// A config made of key=value overrides alone, validated against `schema` as load() does; `origin` names what the
// config belongs to in messages (for example "the model directory /models/x"). For commands given no recipe file.
Config load_overrides(const std::vector<std::string>& overrides, const Schema& schema, const std::string& origin);

// The top-level `recipe:` value and where it was written, so that a name no recipe has can be reported at its
// file:line:col (recipes::find_recipe). Converts to the plain name for callers that need only that.
struct RecipeName {
  std::string name;
  SourceLocation location;
  operator const std::string&() const { return name; }
  friend bool operator==(const RecipeName& recipe, std::string_view other) { return recipe.name == other; }
};

// Reads only the top-level `recipe:` value (after includes and overrides), to choose which schema applies.
// Throws ConfigError naming the file when it is missing.
RecipeName peek_recipe_name(const std::filesystem::path& file, const std::vector<std::string>& overrides);

}  // namespace tune::config
