// tokenizer.json "pre_tokenizer": splits normalized text into the pieces the model encodes one by one. Split
// (string or regex, every behaviour, invert), ByteLevel (optional prefix space and GPT-2 regex; maps bytes to the
// byte-level alphabet), Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation and Sequence.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tune::data::hf {

struct Piece {
  std::string text;
  bool at_start = false;  // begins the whole input (Metaspace's prepend_scheme "first")
};

using PreTokenizer = std::function<std::vector<Piece>(std::vector<Piece>)>;

// A null JSON value gives the identity. `source` names the file for errors.
PreTokenizer make_pre_tokenizer(const nlohmann::json& spec, const std::string& source);

}  // namespace tune::data::hf
