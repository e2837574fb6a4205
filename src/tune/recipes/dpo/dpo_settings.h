// The DPO recipe's settings: everything the SFT recipe reads (model, tokenizer, LoRA/QLoRA, template, generation,
// so `tune infer`, `chat` and `export` treat a DPO run as an SFT run) plus the preference keys under dpo.*.
#pragma once

#include <optional>
#include <string>

#include "tune/config/config.h"
#include "tune/recipes/sft/sft_settings.h"
#include "tune/train/preference_loss.h"

namespace tune::recipes::dpo {

struct DpoSettings {
  sft::SftSettings sft;
  train::PreferenceLossOptions loss;
  // The reference of a full fine-tune: a frozen model read from here (default: model.path, the policy's start).
  std::optional<std::string> reference_path;
  bool reference_bf16 = true;  // dpo.reference_dtype: the frozen copy's storage
  // dpo.precompute_reference: the reference's log-probs computed once before training (reference_logps.h); no
  // reference copy or reference forward during training.
  bool precompute_reference = false;
  bool uses_reference() const { return train::needs_reference(loss.type); }
  bool reference_is_base() const { return sft.model.lora.lora.rank > 0; }  // LoRA: adapters off, no copy
};

config::Schema dpo_schema();
DpoSettings read_dpo_settings(const config::Config& config);
// Recipe::validate for dpo: the SFT checks that apply, the dpo.* keys, and the keys DPO does not use refused.
void validate_dpo_config(const config::Config& config);

}  // namespace tune::recipes::dpo
