// Reading config YAML without a schema: files with their `include:` chains and key=value overrides,
// flattened to dotted keys with the file:line:col each value came from. Validation happens later (validate.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tune/config/config.h"

namespace tune::config {

struct RawValue {
  YAML::Node node;                // a scalar, a sequence or null (maps are flattened away)
  SourceLocation key_location;    // where the key was written: unknown-key problems point here
  SourceLocation value_location;  // where the value was written: type problems point here
  long order = 0;                 // when it was set, so problems come out in reading order
};

struct RawConfig {
  std::map<std::string, RawValue> leaves;          // dotted key -> the winning value
  std::map<std::string, SourceLocation> sections;  // dotted key -> where a map was given for it
  std::vector<std::string> problems;               // syntax, include and duplicate-key problems
  bool incomplete = false;  // a file could not be read, so a key that seems missing may just be unreadable
};

// Reads `file` and its includes (included files first, the file's own keys win), then applies `overrides`.
// Problems are collected in the result, not thrown, so they can be reported with the schema's.
RawConfig read_raw_config(const std::filesystem::path& file, const std::vector<std::string>& overrides);
// Only key=value overrides, for a config that has no file (a bare model directory given to tune infer).
RawConfig read_raw_overrides(const std::vector<std::string>& overrides);

}  // namespace tune::config
