// Typed reads of a JSON object's fields (model config.json files) with errors that name the file and the field:
// "config.json: field 'rope_scaling.factor' must be a number, got "x" (string)". A missing or null field takes the
// caller's default.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tune::io {

class JsonFields {
 public:
  enum class Blame {
    input,   // a model or data file is wrong: tune::InputError
    config,  // the user's configuration is wrong: tune::UsageError (exit code 2)
  };

  // `prefix` is prepended to field names in errors (a nested object: "rope_scaling.").
  JsonFields(const nlohmann::json& object, std::string source, std::string prefix = "", Blame blame = Blame::input);

  bool has(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  int64_t integer(const std::string& key, int64_t fallback) const;
  int64_t positive(const std::string& key, int64_t fallback) const;  // an integer > 0
  double real(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> positive_list(const std::string& key, std::vector<int64_t> fallback) const;  // non-empty
  std::vector<std::string> string_list(const std::string& key, std::vector<std::string> fallback) const;  // non-empty

  // Fields that must be present (tune's own files: checkpoints, latents.json): a missing one is an error naming it.
  int64_t integer(const std::string& key) const;
  double real(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;

 private:
  void require(const std::string& key) const;

  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
  Blame blame_;
};

}  // namespace tune::io
