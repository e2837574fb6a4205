// A sentencepiece tokenizer (tokenizer.model), with BOS/EOS handled as Hugging Face's LlamaTokenizer does:
// encode() adds BOS (add_bos default true) and no EOS; special tokens are recognised when the model defines them
// as user-defined or control symbols (e.g. <|im_start|> in the project's tiny tokenizer).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tune::data {

class SentencePieceBackend;  // sentencepiece_backend.h: why sentencepiece sits behind an interface

class Tokenizer {
 public:
  // Throws tune::InputError naming the file when it is missing or not a sentencepiece model.
  static Tokenizer load(const std::filesystem::path& model_path);

  std::vector<int64_t> encode(const std::string& text, bool add_bos = true, bool add_eos = false) const;
  std::string decode(const std::vector<int64_t>& ids) const;  // skips BOS/EOS/pad
  std::string piece(int64_t id) const;                         // the raw piece, for per-token displays
  int64_t piece_to_id(const std::string& piece) const;         // -1 when unknown

  int64_t vocab_size() const;
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t pad_id() const;  // the model's pad id, or eos_id when it has none
  const std::filesystem::path& model_path() const { return path_; }

 private:
  std::shared_ptr<SentencePieceBackend> backend_;
  std::filesystem::path path_;
};

}  // namespace tune::data
