// Building the SFT model and tokenizer: from a Hugging Face directory, from a run checkpoint, or randomly
// initialised from the recipe's architecture keys; LoRA adapters added and the base frozen when configured.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "tune/data/tokenizer.h"
#include "tune/models/llama.h"
#include "tune/recipes/sft/sft_settings.h"

namespace tune::recipes::sft {

data::Tokenizer load_tokenizer(const SftSettings& settings);

// Weights come from settings.model.path when set, else a seeded random init (HF's: normal(0, 0.02) for
// matrices and embeddings, ones for norms). With LoRA, base weights are frozen.
// frozen_weights_bf16 (param_dtype: bf16) with LoRA and a model.path: the frozen weights are built in bf16 module by
// module and the file's tensors read into them one at a time, so loading never holds the fp32 base model (a 1B
// model peaks near its 2.5 GB of bf16 weights, not at 4.9 GB of fp32). The result equals building in fp32 and
// calling store_frozen_weights_in_bf16; with a random init the model is built that way (it is small).
// ModelUse::inference freezes every weight (generation and attribution differentiate with respect to the prompt's
// embeddings, never the weights), so param_dtype bf16 then builds all of them in bf16, LoRA or not.
enum class ModelUse { training, inference };
models::LlamaForCausalLM build_model(const SftSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed,
                                     bool frozen_weights_bf16 = false, ModelUse use = ModelUse::training);

// param_dtype: bf16 — stores every frozen (requires_grad false) weight in bf16, halving the base model's memory.
// Returns the number of frozen tensors now stored in bf16 (converted here or built so by build_model).
int64_t store_frozen_weights_in_bf16(models::LlamaForCausalLM& model);

// Loads a HF model directory's weights into `model` (names must match exactly; see io::load_into_module). NF4
// projections (lora.quantize_base nf4) take their weight quantised as it loads, one tensor at a time, so the dense
// model never exists whole; a weight the directory holds pre-quantised by bitsandbytes is read as stored.
void load_model_weights(models::LlamaForCausalLM& model, const std::filesystem::path& model_dir);

// A directory saved by transformers with bitsandbytes 4-bit: the projections it holds in NF4 (every layer's, as tune
// stores them; a skip list that splits a projection kind across layers throws tune::InputError) and whether its
// statistics are double-quantised. Empty for a directory without quantization_config.
struct PrequantizedBase {
  std::vector<std::string> projections;
  bool double_quant = false;
};
PrequantizedBase prequantized_base(const std::filesystem::path& model_dir, const models::LlamaConfig& config);

// What the NF4 base weights hold: elements and bytes (packed weights and statistics).
struct Nf4Footprint {
  int64_t tensors = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};
Nf4Footprint nf4_footprint(const models::LlamaForCausalLM& model);

// Tensors of `model` to save under HF names: all parameters for full fine-tuning, LoRA tensors only (under PEFT's
// "base_model.model." prefix) when the model has LoRA.
std::vector<std::pair<std::string, torch::Tensor>> weights_to_save(const models::LlamaForCausalLM& model);

}  // namespace tune::recipes::sft
