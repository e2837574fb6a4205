// Sets an environment variable for the lifetime of the object, then restores the previous value (tests that pin
// a choice tune reads from the environment, such as TUNE_CPU_ATTENTION).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace tune::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    setenv(name, value.c_str(), 1);
  }
  // Unsets the variable for the lifetime of the object.
  ScopedEnv(const char* name, std::nullopt_t) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    unsetenv(name);
  }
  ~ScopedEnv() {
    if (previous_) {
      setenv(name_, previous_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

}  // namespace tune::testing
