// Validation and reading of weighted path lists (see weighted_paths.h).
#include "tune/config/weighted_paths.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <glob.h>

#include <algorithm>
#include <cctype>
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
std::string absolute_path(const std::string& path) {
  return std::filesystem::absolute(std::filesystem::path(path)).lexically_normal().string();
}

bool is_pattern(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

// The files a folder stands for: every .jsonl, .json and .txt under it (the layouts the data readers take), hidden
// names skipped, in byte order of their paths.
std::vector<std::string> data_files_under(const std::filesystem::path& folder) {
  std::vector<std::string> files;
  for (auto it = std::filesystem::recursive_directory_iterator(folder); it != std::filesystem::end(it); ++it) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    std::string extension = it->path().extension().string();
    std::transform(extension.begin(), extension.end(), extension.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (it->is_regular_file() && (extension == ".jsonl" || extension == ".json" || extension == ".txt")) {
      files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The regular files a glob pattern matches (POSIX glob: *, ?, [...] within a path component), in byte order.
std::vector<std::string> files_matching(const std::string& pattern) {
  glob_t matches{};
  std::vector<std::string> files;
  if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      if (std::filesystem::is_regular_file(matches.gl_pathv[i])) files.emplace_back(matches.gl_pathv[i]);
    }
  }
  globfree(&matches);
  std::sort(files.begin(), files.end());  // glob's own order follows the locale's collation
  return files;
}

class Checker {
 public:
  Checker(const std::string& key, const SourceLocation& location, std::vector<std::string>& problems)
      : key_(key), location_(location), problems_(problems) {}

  std::optional<std::string> check(const YAML::Node& node) {
    if (node.IsScalar()) {
      if (node.Scalar().empty()) return problem(node, key_, "expected a path, got an empty string");
      const auto files = expand(node, key_, node.Scalar());
      if (!files) return std::nullopt;
      std::vector<std::string> texts;
      for (const auto& file : *files) texts.push_back(string_text(file));
      return texts.size() == 1 ? texts[0] : flow_list_text(texts);  // one file reads and prints as a path key
    }
    if (!node.IsSequence()) {
      return problem(node, key_, fmt::format("expected a path or a list of files ({} each), got {}", kShape,
                                             describe(node)));
    }
    if (node.size() == 0) return problem(node, key_, "expected at least one file, got an empty list");
    std::vector<std::string> texts;
    bool valid = true;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::optional<std::vector<std::string>> element_texts = element(node[i], fmt::format("{}[{}]", key_, i));
      valid = valid && element_texts.has_value();
      if (element_texts) texts.insert(texts.end(), element_texts->begin(), element_texts->end());
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

  // A path standing for several files: a folder (its data files) or a glob pattern; otherwise the path itself,
  // which need not exist yet (the data reader names a missing file).
  std::optional<std::vector<std::string>> expand(const YAML::Node& node, const std::string& what,
                                                 const std::string& written) {
    const std::string path = absolute_path(written);
    // What exists as named comes first: a file or folder whose name holds *, ? or [ is not read as a pattern.
    if (std::filesystem::is_regular_file(path)) return std::vector<std::string>{path};
    if (std::filesystem::is_directory(path)) {
      std::vector<std::string> files;
      try {
        files = data_files_under(path);
      } catch (const std::filesystem::filesystem_error& error) {
        return problem(node, what, fmt::format("cannot list the folder '{}': {}", written, error.code().message()));
      }
      if (files.empty()) {
        return problem(node, what, fmt::format("the folder '{}' holds no .jsonl, .json or .txt file", written));
      }
      return files;
    }
    if (written.find("**") != std::string::npos) {
      return problem(node, what, fmt::format("'{}': ** is not supported; name the folder to read every data file "
                                             "under it, or use *, ? and [...] within one folder", written));
    }
    // The pattern as written (a relative one from where tune runs, as glob reads it), so that the characters of the
    // working directory's own path are never taken as a pattern.
    if (is_pattern(written)) {
      std::vector<std::string> files;
      for (const auto& match : files_matching(written)) files.push_back(absolute_path(match));
      if (files.empty()) return problem(node, what, fmt::format("'{}' matches no file", written));
      return files;
    }
    return std::vector<std::string>{path};
  }

  std::optional<std::vector<std::string>> element(const YAML::Node& node, const std::string& what) {
    if (node.IsScalar()) {
      if (node.Scalar().empty()) return problem(node, what, fmt::format("expected {}, got an empty string", kShape));
      const auto files = expand(node, what, node.Scalar());
      if (!files) return std::nullopt;
      std::vector<std::string> texts;
      for (const auto& file : *files) texts.push_back(string_text(file));
      return texts;
    }
    if (!node.IsMap()) return problem(node, what, fmt::format("expected {}, got {}", kShape, describe(node)));
    std::optional<std::vector<std::string>> paths;
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
        paths = expand(item.second, what + ".path", item.second.Scalar());
        if (!paths) valid = false;
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
    if (!paths && valid) return problem(node, what, "missing path; write {path: FILE, weight: W}");
    if (!valid) return std::nullopt;
    // A folder or pattern gives each of its files the entry's weight (passes over that file per epoch).
    std::vector<std::string> texts;
    for (const auto& path : *paths) {
      texts.push_back(weight ? fmt::format("{{path: {}, weight: {}}}", string_text(path), real_text(*weight))
                             : string_text(path));
    }
    return texts;
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
