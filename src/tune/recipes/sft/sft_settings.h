// The SFT recipe's own settings (model, tokenizer, data, LoRA, generation), read once from the Config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/data/sft_dataset.h"
#include "tune/models/llama.h"

namespace tune::recipes::sft {

struct ModelSettings {
  std::optional<std::string> path;   // HF model directory; unset: random init from `architecture`
  models::LlamaConfig architecture;  // used only when path is unset (vocab_size from the tokenizer if 0)
  models::LlamaLoraOptions lora;
};

// One training file and its weight: how many passes over it one epoch makes (data::MixedExamples).
struct DataFile {
  std::string path;
  double weight = 1.0;
};

struct DataSettings {
  std::vector<DataFile> train;           // one or more files, mixed by weight
  std::optional<std::string> eval_path;  // else a held-out fraction of train
  double eval_fraction = 0.02;
  data::DataFormat format = data::DataFormat::automatic;
  std::string chat_template = "auto";
  int64_t max_length = 512;
  bool packing = true;
  bool train_on_prompt = false;
  bool shuffle = true;
  data::OnBadLine on_bad_line = data::OnBadLine::fail;
};

struct GenerationSettings {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;
};

struct SftSettings {
  ModelSettings model;
  std::optional<std::string> tokenizer_path;  // default: <model.path>/tokenizer.model
  DataSettings data;
  GenerationSettings generation;
  bool chunked_loss = false;  // training.chunked_loss: train::causal_lm_linear_loss_sum instead of lm_head + loss
  bool cuda_graph = false;    // training.cuda_graph: the step captured once and replayed (sft_graph_step.h)
};

config::Schema sft_schema();
// Reads the SFT keys; cross-checks with the shared ones (param_dtype needs LoRA) use `run`.
SftSettings read_sft_settings(const config::Config& config);
// Recipe::validate for sft: the run, training and distributed settings, the SFT keys, and the checks across them.
void validate_sft_config(const config::Config& config);

}  // namespace tune::recipes::sft
