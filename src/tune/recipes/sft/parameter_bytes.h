// What lives across training steps for a Llama model, counted from its config without building it (a planner must
// answer for an 8B model without allocating 32 GB): parameters by storage dtype, gradients and AdamW state of the
// trainable ones, as models/llama_layers.cpp and nn/lora_linear.cpp register them.
#pragma once

#include <cstdint>

#include "tune/models/llama.h"
#include "tune/models/llama_config.h"

namespace tune::recipes::sft {

struct ParameterCounts {
  int64_t total = 0;      // elements of every parameter (LoRA adapters included)
  int64_t trainable = 0;  // full fine-tuning: all; LoRA: the adapters (freeze_base_weights freezes the rest)
  int64_t largest_trainable = 0;  // elements of the largest trainable tensor
  int64_t trainable_per_layer = 0;  // in each decoder layer
  // Trainable elements whose gradients backward produces before the layers': the output head and final norm (full
  // fine-tuning; with tied embeddings the head is the embedding). An untied input embedding's comes after them.
  int64_t trainable_head = 0;
  // QLoRA (lora.nf4_modules): elements of the projection weights stored NF4 (within `total`), and their bytes
  // (packed nibbles plus block statistics: about 0.53 bytes per element with double quantisation).
  int64_t nf4 = 0;
  int64_t nf4_bytes = 0;
  int64_t largest_nf4 = 0;  // elements of the largest NF4 weight (what one dequantisation materialises)
};

ParameterCounts count_parameters(const models::LlamaConfig& config, const models::LlamaLoraOptions& lora);

// Bytes of the steady state: parameters (trainable in fp32; NF4 ones at their packed size; other frozen ones in bf16
// under param_dtype bf16, else fp32),
// their fp32 gradients, and AdamW's two moments (fp32, or bf16 under optimizer.state_dtype bf16).
struct ResidentBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
};

ResidentBytes resident_bytes(const ParameterCounts& counts, bool frozen_weights_bf16, bool optimizer_state_bf16);

}  // namespace tune::recipes::sft
