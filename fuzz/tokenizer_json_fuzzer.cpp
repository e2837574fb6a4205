// A Hugging Face tokenizer.json (Tokenizer::load, data/hf/), with the tokenizer_config.json beside it (special tokens,
// and the model's chat_template that data.template auto uses), then encoding and decoding. The input is
// "tokenizer.json [SEP tokenizer_config.json [SEP text to encode]]", SEP being kSeparator on a line of its own; a
// plain tokenizer.json (the seeds) is a valid input.
#include <algorithm>

#include "fuzz_support.h"
#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"

namespace {

constexpr std::string_view kSeparator = "\n#tokenizer_config.json#\n";

// Texts every accepted tokenizer encodes: ASCII, spaces, digits, non-ASCII letters, emoji, invalid UTF-8 (read as
// U+FFFD), and special-token texts of the common chat formats.
const std::string kTexts[] = {"Hello, world! It's 2024.", "  two  spaces\n\nnew\tlines ", "naïve café 日本語 😀👍🏽",
                              "bad \xff\xfe utf8 \xc3\x28", "<s>[INST] hi [/INST]</s>",
                              "<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|><|eot_id|>", ""};

void exercise(const tune::data::Tokenizer& tokenizer, const std::string& text) {
  const std::vector<int64_t> ids = tokenizer.encode(text, /*add_bos=*/true, /*add_eos=*/true);
  (void)tokenizer.decode(ids);
  for (int64_t id : ids) {
    (void)tokenizer.piece(id);
    (void)tokenizer.is_special_token(id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = tune::fuzz::split(tune::fuzz::as_text(data, size), kSeparator);
  const auto path = tune::fuzz::write_file("tokenizer.json", parts[0]);
  const auto config = tune::fuzz::scratch_dir() / "tokenizer_config.json";
  if (parts.size() > 1) {
    tune::fuzz::write_file("tokenizer_config.json", parts[1]);
  } else {
    std::filesystem::remove(config);
  }
  tune::fuzz::expect_input_errors([&] {
    const auto tokenizer = tune::data::Tokenizer::load(path);
    for (const std::string& text : kTexts) exercise(tokenizer, text);
    if (parts.size() > 2) exercise(tokenizer, std::string(parts[2]));
    // Every id, including ones out of range: decode and piece must answer "" or a piece, never read outside.
    const int64_t vocab = tokenizer.vocab_size();
    for (int64_t id = -2; id < std::min<int64_t>(vocab, 512) + 2; ++id) {
      (void)tokenizer.piece(id);
      (void)tokenizer.decode({id});
    }
    (void)tokenizer.bos_id();
    (void)tokenizer.eos_id();
    (void)tokenizer.pad_id();
    // The model's own chat template, as data.template auto reads it, applied to a conversation and a prompt.
    const auto chat = tune::data::ChatTemplate::resolve("auto", tokenizer);
    tune::data::Conversation conversation{{{"system", "Be brief."}, {"user", "hi"}, {"assistant", "hello"},
                                           {"user", "again <eos>"}, {"assistant", ""}}, "fuzz"};
    (void)chat.encode(tokenizer, conversation, /*train_on_prompt=*/false);
    conversation.messages.pop_back();
    (void)chat.encode_prompt(tokenizer, conversation);
  });
  return 0;
}
