// Checking raw config values against a Schema: unknown keys, types, choices, required keys, defaults.
// Produces the canonical entries of a Config and every problem found, each starting with its location.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/config/raw_config.h"
#include "tune/config/schema.h"

namespace tune::config {

// `recipe_file` is named by problems that have no line of their own (a missing required key).
// Problems are appended to `problems`; the returned entries hold only the keys that passed.
std::map<std::string, Config::Entry> validate(const RawConfig& raw, const Schema& schema,
                                              const std::string& recipe_file, std::vector<std::string>& problems);

}  // namespace tune::config
