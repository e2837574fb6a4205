// JsonFields: type checks with the file, the field and the offending value in every message.
#include "tune/io/json_fields.h"

#include <fmt/format.h>

#include "tune/core/error.h"

namespace tune::io {

using nlohmann::json;

JsonFields::JsonFields(const json& object, std::string source, std::string prefix, Blame blame)
    : object_(object), source_(std::move(source)), prefix_(std::move(prefix)), blame_(blame) {}

bool JsonFields::has(const std::string& key) const { return object_.contains(key) && !object_.at(key).is_null(); }

void JsonFields::fail(const std::string& key, const std::string& message) const {
  const std::string text = fmt::format("{}: field '{}{}' {}", source_, prefix_, key, message);
  if (blame_ == Blame::config) throw UsageError(text);
  throw InputError(text);
}

int64_t JsonFields::integer(const std::string& key, int64_t fallback) const {
  if (!has(key)) return fallback;
  const json& value = object_.at(key);
  if (!value.is_number_integer()) fail(key, fmt::format("must be an integer, got {} ({})", value.dump(), value.type_name()));
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX}) {
    fail(key, fmt::format("is out of range, got {}", value.dump()));
  }
  return value.get<int64_t>();
}

int64_t JsonFields::positive(const std::string& key, int64_t fallback) const {
  const int64_t value = integer(key, fallback);
  if (value <= 0) fail(key, fmt::format("must be positive, got {}", value));
  return value;
}

double JsonFields::real(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const json& value = object_.at(key);
  if (!value.is_number()) fail(key, fmt::format("must be a number, got {} ({})", value.dump(), value.type_name()));
  return value.get<double>();
}

bool JsonFields::boolean(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const json& value = object_.at(key);
  if (!value.is_boolean()) fail(key, fmt::format("must be true or false, got {}", value.dump()));
  return value.get<bool>();
}

std::string JsonFields::string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const json& value = object_.at(key);
  if (!value.is_string()) fail(key, fmt::format("must be a string, got {}", value.dump()));
  return value.get<std::string>();
}

std::vector<int64_t> JsonFields::positive_list(const std::string& key, std::vector<int64_t> fallback) const {
  if (!has(key)) return fallback;
  const json& value = object_.at(key);
  if (!value.is_array() || value.empty()) fail(key, fmt::format("must be a non-empty list of integers, got {}", value.dump()));
  std::vector<int64_t> result;
  for (const json& item : value) {
    if (!item.is_number_integer() || item.get<int64_t>() <= 0) {
      fail(key, fmt::format("must be a list of positive integers, got {}", value.dump()));
    }
    result.push_back(item.get<int64_t>());
  }
  return result;
}

std::vector<std::string> JsonFields::string_list(const std::string& key, std::vector<std::string> fallback) const {
  if (!has(key)) return fallback;
  const json& value = object_.at(key);
  if (!value.is_array() || value.empty()) fail(key, fmt::format("must be a non-empty list of strings, got {}", value.dump()));
  std::vector<std::string> result;
  for (const json& item : value) {
    if (!item.is_string()) fail(key, fmt::format("must be a list of strings, got {}", value.dump()));
    result.push_back(item.get<std::string>());
  }
  return result;
}

void JsonFields::require(const std::string& key) const {
  if (!has(key)) fail(key, "is missing");
}

int64_t JsonFields::integer(const std::string& key) const {
  require(key);
  return integer(key, 0);
}

double JsonFields::real(const std::string& key) const {
  require(key);
  return real(key, 0.0);
}

bool JsonFields::boolean(const std::string& key) const {
  require(key);
  return boolean(key, false);
}

std::string JsonFields::string(const std::string& key) const {
  require(key);
  return string(key, "");
}

}  // namespace tune::io
