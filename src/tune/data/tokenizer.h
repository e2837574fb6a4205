// A model's tokenizer: Hugging Face's tokenizer.json (byte-level or sentencepiece-style BPE: Llama 3, Qwen, Gemma,
// Mistral; data/hf/), a sentencepiece tokenizer.model, or T5's spiece.model (T5's conventions: no BOS, EOS when
// add_eos, <extra_id_N> sentinels; data/t5_tokenizer.h). encode() adds the model's leading special tokens (BOS)
// when add_bos (default true; a model without BOS adds none) and trailing ones when add_eos; special-token text in
// the input maps to its id. tokenizer_config.json beside either file names BOS, EOS and pad (sentencepiece models
// also carry their own).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tune::data {

class TokenizerBackend;  // tokenizer_backend.h

class Tokenizer {
 public:
  // `path`: a tokenizer.json, a tokenizer.model, a spiece.model, or a directory holding one (spiece.model first;
  // otherwise tokenizer.json over tokenizer.model, as in transformers). Throws tune::InputError naming the file
  // when it is missing or cannot be read.
  static Tokenizer load(const std::filesystem::path& path);
  // True when `directory` holds a tokenizer.json, tokenizer.model or spiece.model.
  static bool directory_has_tokenizer(const std::filesystem::path& directory);

  std::vector<int64_t> encode(const std::string& text, bool add_bos = true, bool add_eos = false) const;
  std::string decode(const std::vector<int64_t>& ids) const;  // skips BOS/EOS/pad
  std::string piece(int64_t id) const;                         // the raw piece, for per-token displays
  int64_t piece_to_id(const std::string& piece) const;         // -1 when unknown
  bool is_special_token(int64_t id) const;                     // BOS/EOS/pad, <|eot_id|>, <|im_end|>, ...

  int64_t vocab_size() const;
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t pad_id() const;  // the model's pad id, or eos_id when it has none
  const std::filesystem::path& model_path() const { return path_; }  // the tokenizer.json, .model or spiece.model
  // The files that define it (model_path() and a tokenizer_config.json beside it): what a checkpoint copies.
  std::vector<std::filesystem::path> files() const;
  bool is_tokenizer_json() const;

 private:
  std::shared_ptr<TokenizerBackend> backend_;
  std::filesystem::path path_;
};

}  // namespace tune::data
