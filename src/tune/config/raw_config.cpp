// Reads config files (following `include:`) and overrides into dotted keys with their locations.
#include "tune/config/raw_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>

#include "tune/core/paths.h"

namespace tune::config {

namespace fs = std::filesystem;

namespace {

using LocationOf = std::function<SourceLocation(const YAML::Mark&)>;

// Config files are small; anything bigger (or not a regular file: /dev/zero, /dev/urandom, a FIFO) is a mistake
// that would otherwise exhaust memory or never finish reading.
constexpr std::uintmax_t kMaxConfigBytes = std::uintmax_t{1} << 20;
// Config keys are a few levels deep. A map nested deeper is a mistake, or a YAML alias inside its own anchor
// (`a: &x {b: *x}`), which yaml-cpp reads as a map that contains itself: flattening it recursed until the stack
// overflowed (found by fuzz/config_fuzzer.cpp).
constexpr long kMaxKeyDepth = 32;
constexpr const char* kExpectedConfigFile = "expected a YAML file of at most 1 MiB";

std::string describe_file_type(fs::file_type type) {
  switch (type) {
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

std::string describe_node_kind(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsNull()) return "nothing (null)";
  return fmt::format("'{}'", node.Scalar());
}

// "a.b" is fine; "", "a..b", ".a" and "a." cannot be told apart from nesting mistakes, so they are refused.
bool is_well_formed_key(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.') return false;
  return key.find("..") == std::string::npos;
}

class RawReader {
 public:
  RawConfig result;

  void read_top_file(const fs::path& file) {
    std::vector<std::pair<fs::path, std::string>> chain;
    read_file(file, file.string(), "", chain);
  }

  void apply_overrides(const std::vector<std::string>& overrides) {
    std::map<std::string, SourceLocation> seen;
    for (const std::string& text : overrides) apply_override(text, seen);
  }

 private:
  long next_order_ = 0;

  // A file (or part of one) that could not be read: its keys are missing from the result.
  void unreadable(std::string problem) {
    result.problems.push_back(std::move(problem));
    result.incomplete = true;
  }

  // `chain` holds the files being read, outermost first, to detect include cycles. `included_at` is the
  // file:line:col of the include entry that named `file` (empty for the top-level file).
  void read_file(const fs::path& file, const std::string& display_name, const std::string& included_at,
                 std::vector<std::pair<fs::path, std::string>>& chain) {
    std::optional<YAML::Node> document = parse_file(file, display_name, included_at);
    if (!document || document->IsNull()) return;
    const LocationOf location_of = [&display_name](const YAML::Mark& mark) {
      SourceLocation location;
      location.file = display_name;
      if (!mark.is_null()) {
        location.line = mark.line + 1;
        location.column = mark.column + 1;
      }
      return location;
    };
    if (!document->IsMap()) {
      unreadable(fmt::format("{}: expected settings as `key: value` lines at the top level, got {}",
                             location_of(document->Mark()).to_string(), describe_node_kind(*document)));
      return;
    }

    chain.emplace_back(identity_of(file), display_name);
    for (const auto& item : *document) {
      if (item.first.IsScalar() && item.first.Scalar() == "include") {
        read_includes(item.second, file, location_of, chain);
      }
    }
    chain.pop_back();

    // The file's own keys come after its includes, so they win.
    std::map<std::string, SourceLocation> seen_in_this_file;
    flatten(*document, "", location_of, seen_in_this_file, /*top_level=*/true);
  }

  std::optional<YAML::Node> parse_file(const fs::path& file, const std::string& display_name,
                                       const std::string& included_at) {
    // "r.yaml:3:12: included file 'x.yaml' is ..." for includes, "x.yaml: is ..." for the top-level file.
    const auto refuse = [&](const std::string& what) {
      unreadable(included_at.empty() ? fmt::format("{}: {}", display_name, what)
                                     : fmt::format("{}: included file '{}' {}", included_at, display_name, what));
    };
    std::error_code error;
    const fs::file_status status = fs::status(file, error);
    if (!fs::exists(status)) {
      unreadable(fmt::format("{}: no such file", display_name));
      return std::nullopt;
    }
    if (fs::is_directory(status)) {
      refuse("is a directory; expected a YAML file");
      return std::nullopt;
    }
    if (!fs::is_regular_file(status)) {
      refuse(fmt::format("is {}; {}", describe_file_type(status.type()), kExpectedConfigFile));
      return std::nullopt;
    }
    const std::uintmax_t size = fs::file_size(file, error);
    if (!error && size > kMaxConfigBytes) {
      refuse(fmt::format("is {} bytes; {}", size, kExpectedConfigFile));
      return std::nullopt;
    }
    std::ifstream stream(file, std::ios::binary);
    // At most one byte over the limit is read, so a file that grows after the size check cannot run away either.
    std::string text(kMaxConfigBytes + 1, '\0');
    stream.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (stream.bad() || (!stream && !stream.eof())) {
      refuse("cannot be read (check its permissions)");
      return std::nullopt;
    }
    text.resize(static_cast<size_t>(stream.gcount()));
    if (text.size() > kMaxConfigBytes) {
      refuse(fmt::format("is larger than 1 MiB; {}", kExpectedConfigFile));
      return std::nullopt;
    }
    try {
      return YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      unreadable(
          fmt::format("{}:{}:{}: YAML syntax error: {}", display_name, e.mark.line + 1, e.mark.column + 1, e.msg));
    } catch (const YAML::Exception& e) {
      unreadable(fmt::format("{}: YAML error: {}", display_name, e.what()));
    }
    return std::nullopt;
  }

  // The same file reached by two spellings must count as the same file for cycle detection.
  static fs::path identity_of(const fs::path& file) {
    std::error_code error;
    fs::path canonical = fs::weakly_canonical(file, error);
    return error ? fs::absolute(file).lexically_normal() : canonical;
  }

  void read_includes(const YAML::Node& value, const fs::path& including_file, const LocationOf& location_of,
                     std::vector<std::pair<fs::path, std::string>>& chain) {
    if (value.IsNull()) return;  // `include:` with nothing after it includes nothing
    std::vector<YAML::Node> entries;
    if (value.IsScalar()) {
      entries.push_back(value);
    } else if (value.IsSequence()) {
      for (const auto& entry : value) entries.push_back(entry);
    } else {
      unreadable(fmt::format(
          "{}: include must be a file name or a list of file names, like include: [model/llama-tiny.yaml], got {}",
          location_of(value.Mark()).to_string(), describe_node_kind(value)));
      return;
    }
    for (const YAML::Node& entry : entries) {
      const SourceLocation where = location_of(entry.Mark());
      if (!entry.IsScalar() || entry.Scalar().empty()) {
        unreadable(fmt::format("{}: include entries must be file names, got {}", where.to_string(),
                               describe_node_kind(entry)));
        continue;
      }
      const fs::path requested = entry.Scalar();
      const fs::path beside_file = (including_file.parent_path() / requested).lexically_normal();
      const fs::path in_configs = (tune::shipped_configs_dir() / requested).lexically_normal();
      fs::path resolved;
      std::error_code error;
      if (requested.is_absolute()) {
        resolved = requested;
      } else if (fs::exists(beside_file, error)) {
        resolved = beside_file;
      } else if (fs::exists(in_configs, error)) {
        resolved = in_configs;
      }
      if (resolved.empty() || !fs::exists(resolved, error)) {
        unreadable(requested.is_absolute()
                       ? fmt::format("{}: included file '{}' not found", where.to_string(), requested.string())
                       : fmt::format("{}: included file '{}' not found (looked for {} and {})", where.to_string(),
                                     requested.string(), beside_file.string(), in_configs.string()));
        continue;
      }
      const fs::path identity = identity_of(resolved);
      for (const auto& [open_file, open_name] : chain) {
        if (open_file != identity) continue;
        std::vector<std::string> names;
        bool in_cycle = false;
        for (const auto& [file_in_chain, name_in_chain] : chain) {
          in_cycle = in_cycle || file_in_chain == identity;
          if (in_cycle) names.push_back(name_in_chain);
        }
        names.push_back(resolved.string());
        unreadable(fmt::format("{}: include cycle: {}; remove one of these includes", where.to_string(),
                               fmt::join(names, " -> ")));
        resolved.clear();
        break;
      }
      if (!resolved.empty()) read_file(resolved, resolved.string(), where.to_string(), chain);
    }
  }

  void flatten(const YAML::Node& map, const std::string& prefix, const LocationOf& location_of,
               std::map<std::string, SourceLocation>& seen, bool top_level) {
    for (const auto& item : map) {
      const SourceLocation key_location = location_of(item.first.Mark());
      if (!item.first.IsScalar()) {
        result.problems.push_back(fmt::format("{}: a key must be a plain name like optimizer.lr, got {}",
                                              key_location.to_string(), describe_node_kind(item.first)));
        continue;
      }
      const std::string& name = item.first.Scalar();
      if (top_level && name == "include") continue;  // read before the file's own keys
      const std::string key = prefix.empty() ? name : prefix + "." + name;
      if (!is_well_formed_key(name)) {
        result.problems.push_back(
            fmt::format("{}: malformed key '{}'; write names separated by single dots, "
                        "like optimizer.lr",
                        key_location.to_string(), key));
        continue;
      }
      if (item.second.IsMap()) {
        set_section(key, key_location);
        if (std::count(key.begin(), key.end(), '.') >= kMaxKeyDepth) {
          result.problems.push_back(fmt::format("{}: '{}...' nests more than {} levels deep (a YAML alias inside its "
                                                "own anchor?)", key_location.to_string(), key.substr(0, 40),
                                                kMaxKeyDepth));
          continue;
        }
        flatten(item.second, key, location_of, seen, false);
        continue;
      }
      SourceLocation value_location = location_of(item.second.Mark());
      // An empty value (`key:`) has its mark on the next line; the key is the better place to point at.
      if (item.second.IsNull() && (value_location.line != key_location.line)) value_location = key_location;
      set_leaf(key, item.second, key_location, value_location, seen);
    }
  }

  void set_leaf(const std::string& key, const YAML::Node& node, const SourceLocation& key_location,
                const SourceLocation& value_location, std::map<std::string, SourceLocation>& seen) {
    if (const auto earlier = seen.find(key); earlier != seen.end()) {
      // Later-wins is for includes and overrides; two values in one place is a mistake worth pointing out.
      result.problems.push_back(fmt::format("{}: {} is set twice (first at {}); keep one of them",
                                            key_location.to_string(), key, earlier->second.to_string()));
      return;
    }
    seen.emplace(key, key_location);
    // A single value replaces whatever map an earlier file gave for the same key.
    result.sections.erase(key);
    erase_nested(result.sections, key);
    erase_nested(result.leaves, key);
    result.leaves[key] = RawValue{node, key_location, value_location, next_order_++};
  }

  // A map merges with the keys earlier files set under it, but replaces a single value given for the key itself.
  void set_section(const std::string& key, const SourceLocation& location) {
    result.leaves.erase(key);
    result.sections[key] = location;
  }

  template <typename Map>
  static void erase_nested(Map& map, const std::string& key) {
    const std::string prefix = key + ".";
    for (auto it = map.lower_bound(prefix); it != map.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      it = map.erase(it);
    }
  }

  void apply_override(const std::string& text, std::map<std::string, SourceLocation>& seen) {
    SourceLocation location;
    location.file = "command line";
    location.override_text = text;
    const auto equals = text.find('=');
    if (equals == std::string::npos || equals == 0) {
      result.problems.push_back(
          fmt::format("{}: an override must be key=value, like optimizer.lr=1e-4", location.to_string()));
      return;
    }
    const std::string key = text.substr(0, equals);
    const std::string value_text = text.substr(equals + 1);
    if (key == "include") {
      result.problems.push_back(
          fmt::format("{}: include can only be used inside a YAML file; put the settings on the command line instead",
                      location.to_string()));
      return;
    }
    if (!is_well_formed_key(key) || key.find_first_of(" \t") != std::string::npos) {
      result.problems.push_back(
          fmt::format("{}: malformed key '{}'; write names separated by single dots, like optimizer.lr=1e-4",
                      location.to_string(), key));
      return;
    }
    YAML::Node value;
    try {
      value = YAML::Load(value_text);
    } catch (const YAML::Exception& e) {
      const std::string message = dynamic_cast<const YAML::ParserException*>(&e) != nullptr
                                      ? static_cast<const YAML::ParserException&>(e).msg
                                      : std::string(e.what());
      unreadable(
          fmt::format("{}: YAML syntax error in the value: {} (quote the value, like "
                      "{}='\"...\"', if it is meant as text)",
                      location.to_string(), message, key));
      return;
    }
    const LocationOf location_of = [&location](const YAML::Mark&) { return location; };
    if (value.IsMap()) {
      set_section(key, location);
      flatten(value, key, location_of, seen, false);
    } else {
      set_leaf(key, value, location, location, seen);
    }
  }
};

}  // namespace

RawConfig read_raw_config(const fs::path& file, const std::vector<std::string>& overrides) {
  RawReader reader;
  reader.read_top_file(file);
  reader.apply_overrides(overrides);
  return std::move(reader.result);
}

RawConfig read_raw_overrides(const std::vector<std::string>& overrides) {
  RawReader reader;
  reader.apply_overrides(overrides);
  return std::move(reader.result);
}

}  // namespace tune::config
