// tokenizer.json "normalizer": NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip and Sequence. Built once from
// the JSON; an unsupported type is an error naming it.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>

namespace tune::data::hf {

using Normalizer = std::function<std::string(const std::string&)>;

// A null JSON value gives the identity. `source` names the file for errors.
Normalizer make_normalizer(const nlohmann::json& spec, const std::string& source);

// The Replace step ({"pattern": {"String"|"Regex": ...}, "content": ...}), shared with the Replace decoder.
Normalizer make_replace(const nlohmann::json& spec, const std::string& where);

}  // namespace tune::data::hf
