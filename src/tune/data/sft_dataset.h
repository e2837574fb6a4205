// Supervised fine-tuning data: rows in instruction form (Alpaca: instruction, input, output), chat form
// (messages: [{role, content}]) or ShareGPT form (conversations: [{from, value}]), in JSONL files or JSON arrays,
// rendered through a chat template into token ids and loss labels; or raw text (continued pre-training).
// Reading files: dataset_file.h. Raw text: text_dataset.h. Several weighted files: dataset_mixture.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tune/data/tokenizer.h"

namespace tune::data {

constexpr int64_t kIgnoreIndex = -100;  // label of tokens that carry no loss (PyTorch/HF convention)

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct Conversation {
  std::vector<ChatMessage> messages;
  std::string source;  // "file.jsonl:LINE" or "file.json:index N" for error messages
};

// A document of raw text (format text): a JSONL/JSON row's `text`, or a whole .txt file.
struct TextDocument {
  std::string text;
  std::string source;  // "file.jsonl:LINE", "file.json:index N" or "file.txt"
};

// automatic: chosen per row by the fields present (messages, conversations, instruction/output); text is never
// guessed, since it changes how everything is tokenized.
enum class DataFormat { automatic, instruction, chat, sharegpt, text };
enum class OnBadLine { fail, skip };

struct ReadReport {
  int64_t rows_read = 0;     // non-blank JSONL lines, JSON array elements, or 1 per plain-text file
  int64_t rows_skipped = 0;  // only with OnBadLine::skip
  std::vector<std::string> first_problems;  // "FILE:LINE: reason" of the first kReportedProblems skipped rows
};
constexpr size_t kReportedProblems = 3;

// Reads a conversation file (JSONL, or a JSON array: dataset_file.h tells them apart) in `format` (any but text).
// Instruction rows become [user: instruction (+ "\n\n" + input when non-empty), assistant: output]. Malformed JSON,
// missing fields, wrong roles or an empty file throw tune::InputError naming file:line or file:index N (or, with
// OnBadLine::skip, skip the row and count it; an empty result is still an error).
std::vector<Conversation> read_jsonl(const std::filesystem::path& path, DataFormat format, OnBadLine on_bad_line,
                                     ReadReport* report = nullptr);

struct TokenizedExample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;  // kIgnoreIndex where no loss; otherwise equal to input_ids (shift happens in the loss)
  int32_t source = 0;           // which of several data files it came from (dataset_mixture.h)
  int64_t document = -1;        // raw text: the document's index in its file (its chunks share it); -1 otherwise
};

// Chat templates, all Jinja text (jinja_chat_template.h) rendered whole and encoded once as transformers'
// apply_chat_template does, special-token text matched as special tokens: the built-ins "plain" (### Instruction /
// ### Response) and "llama2" ([INST] ... [/INST]), which start with BOS and end every reply with EOS so a fine-tuned
// model learns to stop, "chatml" (canonical ChatML: no BOS, no EOS, the reply ends with <|im_end|>) and "llama3";
// the model's own chat_template from the tokenizer_config.json beside its tokenizer ("auto"); and "none": the
// messages' contents back to back (base models, completion-style data), BOS first and EOS last.
// chat_template.cpp documents the built-ins' layouts.
class JinjaChatTemplate;

class ChatTemplate {
 public:
  // The built-ins that need no tokenizer (plain, llama2, chatml, none), BOS and EOS written "<s>" and "</s>";
  // throws UsageError listing valid names.
  static ChatTemplate by_name(const std::string& name);
  // Any name of names(): "auto" is the model's own chat_template when the tokenizer_config.json beside the
  // tokenizer has one, else "plain"; the built-ins render the tokenizer's BOS and EOS text. Throws tune::InputError
  // for a model template that does not parse (naming line and column), and for plain, llama2 or none without EOS.
  static ChatTemplate resolve(const std::string& name, const Tokenizer& tokenizer);
  static std::vector<std::string> names();
  static std::vector<std::string> built_in_names();  // by_name's: plain, llama2, chatml, none
  const std::string& name() const { return name_; }
  bool is_jinja() const { return jinja_ != nullptr; }  // true for every template (all are Jinja now)
  // The text a reply ends with where that is not the tokenizer's EOS (chatml: "<|im_end|>", llama3: "<|eot_id|>"):
  // generation stops on it too. Empty for the model's own template (its stop tokens come with the model).
  std::string end_of_turn_text() const;
  // The template as Jinja source, for a tokenizer_config.json "chat_template" that transformers renders: the model's
  // own or a built-in: exactly the text tune renders and encodes (BOS/EOS as token text).
  std::string jinja_source() const;
  // The text the template renders (what `tune tokenize --messages` shows), before it is encoded once.
  std::string render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // Tokenizes a whole conversation; labels mask everything except assistant turns unless train_on_prompt.
  TokenizedExample encode(const Tokenizer& tokenizer, const Conversation& conversation, bool train_on_prompt) const;
  // Tokenizes the conversation so far (ending with a user turn) plus the header of the assistant's reply:
  // the prompt a generation continues from.
  std::vector<int64_t> encode_prompt(const Tokenizer& tokenizer, const Conversation& conversation) const;

 private:
  explicit ChatTemplate(std::string name) : name_(std::move(name)) {}
  static ChatTemplate built_in_template(const std::string& name, const std::string& bos, const std::string& eos);
  std::string name_;
  std::shared_ptr<const JinjaChatTemplate> jinja_;
  std::optional<std::string> source_;  // jinja_'s source text
};

// Tokenizes every conversation and truncates to max_length (keeping the start); examples left with no loss
// token are dropped and counted.
struct TokenizeReport {
  int64_t truncated = 0;
  int64_t dropped_no_loss = 0;
};
std::vector<TokenizedExample> tokenize_all(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                                           const ChatTemplate& chat_template, int64_t max_length,
                                           bool train_on_prompt, TokenizeReport* report = nullptr);

// Deterministic split: a seeded shuffle of indices, the last `eval_fraction` (at least 1 when > 0) held out.
void split_train_eval(std::vector<TokenizedExample> all, double eval_fraction, uint64_t seed,
                      std::vector<TokenizedExample>& train, std::vector<TokenizedExample>& eval);

}  // namespace tune::data
