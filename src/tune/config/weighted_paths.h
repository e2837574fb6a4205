// Keys that name one file or several, each with a weight: `data.train: a.jsonl`, or
// `data.train: [a.jsonl, {path: b.json, weight: 0.5}]`. What a weight means is the reading recipe's business;
// here it is only a positive number.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "tune/config/config.h"

namespace tune::config {

// Checks `node` for `key`: a path scalar, or a non-empty list whose elements are path scalars or mappings with
// `path` (required) and `weight` (a number > 0, default 1). Every problem is appended with the file:line:col of the
// element (or of its weight) at fault. Paths are made absolute as path keys are (relative to where tune runs). A
// folder stands for every .jsonl, .json and .txt file under it (recursively, hidden names skipped) and a glob
// pattern (*, ? and [...] within a path component; ** is refused) for the regular files it matches, each in byte
// order of their paths and each with the entry's weight; one that finds no file is a problem. The canonical text
// lists the files found, so a run's saved config (and its --resume) reads the same files whatever is added later.
// Returns the canonical YAML text: a scalar stays a scalar, so the single-path form reads and prints as before;
// a list becomes a flow list whose elements without a weight stay bare paths. nullopt when a problem was found.
std::optional<std::string> check_weighted_paths(const std::string& key, const YAML::Node& node,
                                                const SourceLocation& location, std::vector<std::string>& problems);

// The files of a value written by check_weighted_paths, in order.
std::vector<WeightedPath> weighted_paths_of(const YAML::Node& canonical);

}  // namespace tune::config
