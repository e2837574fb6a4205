// JSON as Python's json module writes it. diffusers saves configs with json.dumps, which writes the non-finite
// floats as the bare words NaN, Infinity and -Infinity (DPMSolverMultistepScheduler's default
// "lambda_min_clipped": -Infinity); strict JSON parsers, nlohmann's included, reject them.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace tune::io {

// read_json_file's errors ("PATH: cannot open WHAT", "PATH: invalid JSON: ..."), and NaN / Infinity / -Infinity
// outside strings read as the double values they stand for.
nlohmann::json read_python_json_file(const std::filesystem::path& path, const std::string& what = "the JSON file");

// The same for text in memory; `source` names it in errors.
nlohmann::json parse_python_json(const std::string& text, const std::string& source);

}  // namespace tune::io
