// Building a Schema: each helper fills one KeySpec, with its default written as canonical YAML text.
#include "tune/config/schema.h"

#include <algorithm>

#include "tune/config/yaml_text.h"

namespace tune::config {

Schema& Schema::add(KeySpec spec) {
  // Replacing in place keeps the key where the common schema put it, so to_yaml() order stays stable.
  for (KeySpec& existing : specs_) {
    if (existing.key == spec.key) {
      existing = std::move(spec);
      return *this;
    }
  }
  specs_.push_back(std::move(spec));
  return *this;
}

Schema& Schema::boolean(const std::string& key, bool default_value, const std::string& help) {
  return add({key, ValueType::boolean, default_value ? "true" : "false", false, {}, help});
}

Schema& Schema::integer(const std::string& key, long long default_value, const std::string& help) {
  return add({key, ValueType::integer, std::to_string(default_value), false, {}, help});
}

Schema& Schema::real(const std::string& key, double default_value, const std::string& help) {
  return add({key, ValueType::real, real_text(default_value), false, {}, help});
}

Schema& Schema::string(const std::string& key, const std::string& default_value, const std::string& help) {
  return add({key, ValueType::string, string_text(default_value), false, {}, help});
}

Schema& Schema::choice(const std::string& key, std::vector<std::string> choices, const std::string& default_value,
                       const std::string& help) {
  return add({key, ValueType::string, string_text(default_value), false, std::move(choices), help});
}

Schema& Schema::path(const std::string& key, const std::string& help) {
  return add({key, ValueType::path, std::nullopt, false, {}, help});
}

Schema& Schema::required_path(const std::string& key, const std::string& help) {
  return add({key, ValueType::path, std::nullopt, true, {}, help});
}

Schema& Schema::optional_string(const std::string& key, const std::string& help) {
  return add({key, ValueType::string, std::nullopt, false, {}, help});
}

Schema& Schema::string_list(const std::string& key, std::vector<std::string> default_value, const std::string& help) {
  std::vector<std::string> element_texts;
  for (const std::string& element : default_value) element_texts.push_back(string_text(element));
  return add({key, ValueType::string_list, flow_list_text(element_texts), false, {}, help});
}

Schema& Schema::required_weighted_paths(const std::string& key, const std::string& help) {
  return add({key, ValueType::weighted_paths, std::nullopt, true, {}, help});
}

const KeySpec* Schema::find(const std::string& key) const {
  const auto found = std::find_if(specs_.begin(), specs_.end(), [&](const KeySpec& spec) { return spec.key == key; });
  return found == specs_.end() ? nullptr : &*found;
}

}  // namespace tune::config
