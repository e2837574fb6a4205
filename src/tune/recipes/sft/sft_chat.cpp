// `tune chat` for the SFT recipe: a multi-turn conversation on stdin/stdout with the model's chat template, the
// answer streamed as it is generated. Commands: /reset (forget the conversation), /grad (attribution of the last
// answer to its prompt), /quit; Ctrl-D ends the session too.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/recipes/sft/attribution_table.h"
#include "tune/recipes/sft/inference_session.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes::sft {
namespace {

// Streams an answer: each new token's text is the difference between the decoding of all ids so far and what was
// already printed (a token may end inside a multi-byte character; its bytes appear once the character is whole).
class AnswerPrinter {
 public:
  AnswerPrinter(const data::Tokenizer& tokenizer, const std::vector<int64_t>& stop_ids)
      : tokenizer_(tokenizer), stop_ids_(stop_ids) {}

  void add(int64_t id) {
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) return;
    ids_.push_back(id);
    const std::string text = tokenizer_.decode(ids_);
    if (text.size() > printed_ && !ends_inside_character(text)) {
      std::fwrite(text.data() + printed_, 1, text.size() - printed_, stdout);
      std::fflush(stdout);
      printed_ = text.size();
    }
  }
  std::string finish() {
    const std::string text = tokenizer_.decode(ids_);
    if (text.size() > printed_) std::fwrite(text.data() + printed_, 1, text.size() - printed_, stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    return text;
  }

 private:
  // A trailing replacement character (U+FFFD) is how decoders show an incomplete UTF-8 sequence.
  static bool ends_inside_character(const std::string& text) {
    return text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
  }
  const data::Tokenizer& tokenizer_;
  const std::vector<int64_t>& stop_ids_;
  std::vector<int64_t> ids_;
  size_t printed_ = 0;
};

// The prompt marker goes to stderr, so stdout holds the answers only (pipeable).
void prompt_marker() {
  if (isatty(STDIN_FILENO)) std::fputs("you> ", stderr);
}

}  // namespace

int chat(const InferRequest& request) {
  if (!request.prompts.empty()) throw UsageError("tune chat reads the conversation from stdin; --prompt is for tune infer");
  if (request.json) throw UsageError("--json applies to tune infer; tune chat is interactive");
  InferenceSession session = open_inference_session(request);
  if (!session.chat_template) {
    throw UsageError(fmt::format("{} has no chat template (no tokenizer_config.json chat_template), so a conversation "
                                 "cannot be laid out; HINT: pass one, e.g. `tune chat {} data.template=chatml`, or "
                                 "use tune infer --raw for completions",
                                 session.weights_from, session.weights_from));
  }
  const auto& tokenizer = *session.tokenizer;
  log::info("chat with {} (template {}): /reset forgets the conversation, /grad explains the last answer, "
            "/quit or Ctrl-D ends", session.weights_from, session.chat_template->name());

  data::Conversation conversation;
  std::vector<int64_t> last_prompt, last_answer;
  std::string line;
  for (prompt_marker(); std::getline(std::cin, line); prompt_marker()) {
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      conversation.messages.clear();
      last_prompt.clear();
      last_answer.clear();
      log::info("(conversation reset)");
      continue;
    }
    if (line == "/grad") {
      if (last_answer.empty()) {
        log::warn("/grad: there is no answer yet to explain");
        continue;
      }
      print_attribution(tokenizer, attribute(session.model, last_prompt, last_answer, session.run.mixed_precision,
                                             session.device));
      continue;
    }
    if (line.front() == '/') {
      log::warn("unknown command {} (commands: /reset, /grad, /quit)", line);
      continue;
    }
    conversation.messages.push_back({"user", line});
    const std::vector<int64_t> prompt_ids = session.chat_template->encode_prompt(tokenizer, conversation);
    log::debug("prompt: {} tokens", prompt_ids.size());
    AnswerPrinter printer(tokenizer, session.sampling.stop_ids);
    SamplingOptions sampling = session.sampling;
    sampling.on_token = [&](int64_t id) { printer.add(id); };
    const auto output_ids = generate(session.model, prompt_ids, sampling, session.run.mixed_precision, session.device);
    const std::string answer = printer.finish();
    conversation.messages.push_back({"assistant", answer});
    last_prompt = prompt_ids;
    last_answer = output_ids;
    if (request.grad && !output_ids.empty()) {
      print_attribution(tokenizer, attribute(session.model, prompt_ids, output_ids, session.run.mixed_precision,
                                             session.device));
    }
  }
  return 0;
}

}  // namespace tune::recipes::sft
