// Validation and reading of weighted path lists (see weighted_paths.h).
#include "tune/config/weighted_paths.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "tune/config/suggest.h"
#include "tune/config/yaml_text.h"

namespace tune::config {

namespace {

constexpr const char* kShape = "a path or a {path: FILE, weight: W} mapping";

// Where a node was written: its own line and column when it came from a file; overrides have only the argument.
SourceLocation node_location(const SourceLocation& value_location, const YAML::Node& node) {
  if (!value_location.override_text.empty() || value_location.file.empty() || node.Mark().is_null()) {
    return value_location;
  }
  SourceLocation location = value_location;
  location.line = node.Mark().line + 1;
  location.column = node.Mark().column + 1;
  return location;
}

std::string describe(const YAML::Node& node) {
  if (node.IsNull()) return "null";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.Tag() != "?") return fmt::format("the quoted string \"{}\"", node.Scalar());  // "2" is not a number
  return fmt::format("'{}'", node.Scalar());
}

// The same rule as path keys: relative to where tune runs, not to the YAML file.
std::string absolute_text(const std::string& path) {
  return string_text(std::filesystem::absolute(std::filesystem::path(path)).lexically_normal().string());
}

class Checker {
 public:
  Checker(const std::string& key, const SourceLocation& location, std::vector<std::string>& problems)
      : key_(key), location_(location), problems_(problems) {}

  std::optional<std::string> check(const YAML::Node& node) {
    if (node.IsScalar()) {
      if (node.Scalar().empty()) return problem(node, key_, "expected a path, got an empty string");
      return absolute_text(node.Scalar());
    }
    if (!node.IsSequence()) {
      return problem(node, key_, fmt::format("expected a path or a list of files ({} each), got {}", kShape,
                                             describe(node)));
    }
    if (node.size() == 0) return problem(node, key_, "expected at least one file, got an empty list");
    std::vector<std::string> texts;
    bool valid = true;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::optional<std::string> text = element(node[i], fmt::format("{}[{}]", key_, i));
      valid = valid && text.has_value();
      if (text) texts.push_back(*text);
    }
    if (!valid) return std::nullopt;
    return flow_list_text(texts);
  }

 private:
  const std::string& key_;
  const SourceLocation& location_;
  std::vector<std::string>& problems_;

  std::nullopt_t problem(const YAML::Node& node, const std::string& what, const std::string& message) {
    problems_.push_back(fmt::format("{}: {}: {}", node_location(location_, node).to_string(), what, message));
    return std::nullopt;
  }

  std::optional<std::string> element(const YAML::Node& node, const std::string& what) {
    if (node.IsScalar()) {
      if (node.Scalar().empty()) return problem(node, what, fmt::format("expected {}, got an empty string", kShape));
      return absolute_text(node.Scalar());
    }
    if (!node.IsMap()) return problem(node, what, fmt::format("expected {}, got {}", kShape, describe(node)));
    std::optional<std::string> path;
    std::optional<double> weight;
    bool valid = true;
    for (const auto& item : node) {
      const std::string name = item.first.IsScalar() ? item.first.Scalar() : describe(item.first);
      if (name == "path") {
        if (!item.second.IsScalar() || item.second.Scalar().empty()) {
          problem(item.second, what + ".path", fmt::format("expected a path, got {}", describe(item.second)));
          valid = false;
          continue;
        }
        path = absolute_text(item.second.Scalar());
      } else if (name == "weight") {
        double value = 0;
        // Plain numbers only: a quoted "2" is a string, as for every other number key.
        const bool number =
            item.second.IsScalar() && item.second.Tag() == "?" && parse_real_text(item.second.Scalar(), value);
        if (!number || !(value > 0)) {
          problem(item.second, what + ".weight", fmt::format("expected a number > 0, got {}", describe(item.second)));
          valid = false;
          continue;
        }
        weight = value;
      } else {
        const auto suggestion = nearest_key(name, {"path", "weight"});
        problem(item.first, what,
                fmt::format("unknown key '{}'{}; a file entry takes path and weight", name,
                            suggestion ? fmt::format(" (did you mean '{}'?)", *suggestion) : ""));
        valid = false;
      }
    }
    if (!path && valid) return problem(node, what, "missing path; write {path: FILE, weight: W}");
    if (!valid) return std::nullopt;
    if (!weight) return *path;
    return fmt::format("{{path: {}, weight: {}}}", *path, real_text(*weight));
  }
};

}  // namespace

std::optional<std::string> check_weighted_paths(const std::string& key, const YAML::Node& node,
                                                const SourceLocation& location, std::vector<std::string>& problems) {
  return Checker(key, location, problems).check(node);
}

std::vector<WeightedPath> weighted_paths_of(const YAML::Node& canonical) {
  std::vector<WeightedPath> files;
  if (canonical.IsScalar()) {
    files.push_back({canonical.Scalar(), 1.0});
    return files;
  }
  for (const auto& element : canonical) {
    if (element.IsScalar()) {
      files.push_back({element.Scalar(), 1.0});
      continue;
    }
    double weight = 1.0;
    if (element["weight"]) parse_real_text(element["weight"].Scalar(), weight);
    files.push_back({element["path"].Scalar(), weight});
  }
  return files;
}

}  // namespace tune::config
