// tokenizer.json "decoder": token strings back to text. ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip
// and Sequence; an unsupported type is an error naming it.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tune::data::hf {

// Token strings in, token strings out (a chain, as in the tokenizers library); the text is their concatenation.
using Decoder = std::function<std::vector<std::string>(std::vector<std::string>)>;

// A null JSON value concatenates the tokens as they are. `source` names the file for errors.
Decoder make_decoder(const nlohmann::json& spec, const std::string& source);

}  // namespace tune::data::hf
