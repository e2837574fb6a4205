// A Hugging Face tokenizer.json (the `tokenizers` library's format: Llama 3, Qwen2/2.5/3, Gemma, and Llama 2 /
// Mistral saved by transformers), with the BOS/EOS/pad names of the tokenizer_config.json beside it:
// added tokens (matched before normalization, never split) -> normalizer -> pre-tokenizer -> BPE -> post-processor,
// and the decoder back. Only the BPE model is supported (what every current LLM ships); anything else in the file
// is an error naming the component.
#pragma once

#include <filesystem>
#include <memory>

#include "tune/data/tokenizer_backend.h"

namespace tune::data::hf {

// Throws tune::InputError naming the file and the component when it cannot be read or is not supported.
std::shared_ptr<TokenizerBackend> load_tokenizer_json(const std::filesystem::path& tokenizer_json);

}  // namespace tune::data::hf
