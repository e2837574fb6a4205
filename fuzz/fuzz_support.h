// What the fuzz targets share: a private scratch directory for parsers that take a path, and the rule for
// exceptions. A parser's own errors (tune::Error: InputError, UsageError, ConfigError) are the expected answer to
// bad input, and so is std::filesystem::filesystem_error, which the CLI reports as an ordinary error. Anything else
// escaping a parser (nlohmann::json's type_error, std::out_of_range, bad_alloc, ...) reaches the CLI as an
// "internal error" with no file named, so the targets let it propagate: libFuzzer then reports it as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tune/core/error.h"

namespace tune::fuzz {

// A directory of this process's own under $TUNE_FUZZ_SCRATCH, else /dev/shm (a file is written per execution), removed
// at exit. libFuzzer's -fork and -jobs run several processes at once, so the name holds the process id.
const std::filesystem::path& scratch_dir();

// Writes `bytes` to scratch_dir()/name, replacing what was there, and returns the path.
std::filesystem::path write_file(const std::string& name, std::string_view bytes);

// The input cut at every occurrence of `separator`: how one input carries several files (config includes, a
// tokenizer_config.json beside a tokenizer.json). An input without the separator is one part, so plain files
// (the seed corpora) are valid inputs as they are.
std::vector<std::string_view> split(std::string_view input, std::string_view separator);

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`, swallowing the errors a parser may answer bad input with (see the top of this file).
template <typename Parse>
void expect_input_errors(Parse&& parse) {
  try {
    parse();
  } catch (const tune::Error&) {
  } catch (const std::filesystem::filesystem_error&) {
  }
}

}  // namespace tune::fuzz
