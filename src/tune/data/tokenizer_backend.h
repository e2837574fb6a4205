// What Tokenizer (tokenizer.h) needs from a tokenizer implementation: sentencepiece's tokenizer.model
// (sentencepiece_backend.h, behind a plugin) or Hugging Face's tokenizer.json (hf/tokenizer_json.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tune::data {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Ids of `text` (arbitrary bytes; invalid UTF-8 is read as U+FFFD), with the model's leading special tokens
  // (BOS) when add_bos and trailing ones (EOS) when add_eos. Special-token text in `text` maps to its id.
  virtual std::vector<int64_t> encode(const std::string& text, bool add_bos, bool add_eos) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual std::string id_to_piece(int64_t id) const = 0;   // the raw piece; "" for an unknown id
  virtual int64_t piece_to_id(const std::string& piece) const = 0;  // -1 when unknown
  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;  // -1 when the model has none
  virtual int64_t eos_id() const = 0;
  virtual int64_t pad_id() const = 0;
  virtual int64_t unk_id() const = 0;
  // A control token (BOS/EOS, <|eot_id|>, <|im_end|>, ...): never produced from ordinary text.
  virtual bool is_special_token(int64_t id) const = 0;
};

}  // namespace tune::data
