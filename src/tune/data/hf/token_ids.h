// Token ids as tokenizer.json writes them: integers in [0, 2^32) (the tokenizers library's u32). nlohmann's
// get<int64_t>() truncates 1.5, wraps negative ids around, and converting 1e85 is undefined behaviour (found by
// fuzz/tokenizer_json_fuzzer.cpp under UBSan), so any other number is refused naming where it was.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tune/core/error.h"

namespace tune::data::hf {

inline int64_t token_id(const nlohmann::json& value, const std::string& where) {
  if (!value.is_number_unsigned() || value.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    throw InputError(fmt::format("{}: token id {} is not an integer from 0 to 4294967295", where, value.dump()));
  }
  return static_cast<int64_t>(value.get<uint64_t>());
}

inline std::vector<int64_t> token_ids(const nlohmann::json& list, const std::string& where) {
  if (!list.is_array()) throw InputError(fmt::format("{}: expected a list of token ids, got {}", where, list.dump()));
  std::vector<int64_t> ids;
  for (const auto& value : list) ids.push_back(token_id(value, where));
  return ids;
}

}  // namespace tune::data::hf
