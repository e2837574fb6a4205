// What `tune infer` and `tune chat` share for an LLM: the settings, the weights (a bare model directory, the newest
// checkpoint of a run, or the recipe's base model), the tokenizer, the chat template, the stop tokens and the
// checkpointing runner, set up once from an InferRequest.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/recipe.h"
#include "tune/recipes/sft/generate.h"
#include "tune/recipes/sft/sft_settings.h"

namespace tune::recipes::sft {

struct InferenceSession {
  RunSettings run;
  SftSettings sft;
  torch::Device device{torch::kCPU};
  models::LlamaForCausalLM model{nullptr};
  std::optional<data::Tokenizer> tokenizer;
  // The template the model was fine-tuned with (a recipe or run), or a bare model directory's own
  // (tokenizer_config.json chat_template); unset with --raw or for a bare base model.
  std::optional<data::ChatTemplate> chat_template;
  SamplingOptions sampling;  // --max-new-tokens/--temperature/--top-p over generation.*; stop tokens of the model
  std::shared_ptr<memory::CheckpointRunner> runner;
  std::string weights_from;  // for the log: which directory (or random initialisation) the weights came from
  int64_t parameter_bytes = 0;  // the weights' storage as loaded (param_dtype bf16 halves it)
};

// Threads, allocator tracking and CPU GEMM set up as for training; the model moved to the device with the
// checkpointing runner installed. Throws UsageError for options or overrides that contradict what was trained.
InferenceSession open_inference_session(const InferRequest& request);

// The prompt ids for one user message: the chat template's generation prompt, or BOS + the text when there is none.
std::vector<int64_t> single_turn_prompt(const InferenceSession& session, const std::string& message);

}  // namespace tune::recipes::sft
