// What an SFT checkpoint directory holds (ARCHITECTURE.md §4): Hugging Face weights (full: model.safetensors +
// config.json + tokenizer.model; LoRA: PEFT adapter_model.safetensors + adapter_config.json), optimizer state,
// RNG state and trainer_state.json (step, data position). Directory atomicity is handled by io/run_checkpoints.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tune/data/sft_loader.h"
#include "tune/data/tokenizer.h"
#include "tune/models/llama.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/train/adamw.h"

namespace tune::recipes::sft {

struct TrainerState : TrainerProgress {
  int64_t tokens_seen = 0;
};

// Writes the model (HF/PEFT format), and when `optimizer` is non-null the training state too; the optimizer's own
// state unless `optimizer_state_sharded` (then every rank writes its share: StepLoopHooks::save_optimizer_shard).
void write_checkpoint(const std::filesystem::path& dir, const models::LlamaForCausalLM& model,
                      const data::Tokenizer& tokenizer, const std::string& base_model_path,
                      const train::AdamW* optimizer, const TrainerState& state, bool optimizer_state_sharded = false);

bool is_lora_checkpoint(const std::filesystem::path& dir);
// The weight files a checkpoint holds: model.safetensors + config.json, or the PEFT adapter pair for LoRA.
std::vector<std::string> checkpoint_weight_files(const std::filesystem::path& dir);

// Restores what write_checkpoint wrote into an identically built model and optimizer (its share of the state,
// from one file or any number of ranks' shards), and the CPU RNG.
TrainerState read_checkpoint(const std::filesystem::path& dir, models::LlamaForCausalLM& model, train::AdamW& optimizer,
                             const OptimizerStateReader& read_optimizer = {});

// Loads only the weights (full or LoRA) of a checkpoint into `model`.
void load_checkpoint_weights(const std::filesystem::path& dir, models::LlamaForCausalLM& model);

}  // namespace tune::recipes::sft
