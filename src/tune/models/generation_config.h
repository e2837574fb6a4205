// Hugging Face generation_config.json: the model's own generation defaults. tune reads the stop tokens from it,
// because many chat models list their end-of-turn token there and not in config.json (Llama 3 Instruct's config.json
// names <|end_of_text|> only, its generation_config.json adds <|eot_id|> and <|eom_id|>).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace tune::models {

inline constexpr const char* kGenerationConfigFile = "generation_config.json";

// eos_token_id of DIR/generation_config.json (one id or a list); empty when DIR is empty, the file does not exist or
// has no such field. A file that exists but is not valid JSON, or an eos_token_id that is not an integer or a list of them, is a
// tune::InputError naming the file.
std::vector<int64_t> generation_config_eos_ids(const std::filesystem::path& model_dir);

// `ids` followed by each id of `more` not already in it (order kept: the first is the primary stop token).
std::vector<int64_t> merge_ids(std::vector<int64_t> ids, const std::vector<int64_t>& more);

}  // namespace tune::models
