// Errors caused by the user's input (config, command line, data, model files). They carry a message written
// for the user and an exit code, and are printed without a stack trace by the CLI.
#pragma once

#include <stdexcept>
#include <string>

namespace tune {

class Error : public std::runtime_error {
 public:
  // exit_code follows the CLI contract: 2 for usage or config errors, 1 for runtime failures.
  explicit Error(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// A bad command line or config: exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message, 2) {}
};

// Bad data or model files (truncated, malformed, mismatched): exit code 1.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message, 1) {}
};

}  // namespace tune
