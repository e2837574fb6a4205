// The DPO schema (SFT's, refined) and its checks. Keys DPO does not use stay in the schema, because a DPO run's
// config.yaml is read by the SFT commands (infer, chat, export); a value other than their default is refused here.
#include "tune/recipes/dpo/dpo_settings.h"

#include <fmt/format.h>

#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"

namespace tune::recipes::dpo {

config::Schema dpo_schema() {
  config::Schema schema = sft::sft_schema();
  schema.choice("recipe", {"dpo"}, "dpo", "which recipe family this config is for");
  schema.choice("dpo.loss", train::preference_loss_names(), "sigmoid",
                "sigmoid (DPO), hinge (SLiC), ipo (length-averaged), robust (label smoothing), and the reference-free "
                "simpo (with dpo.simpo_gamma) and orpo (NLL of the chosen reply plus beta x the odds-ratio term)");
  schema.real("dpo.beta", 0.1, "the loss's beta (TRL's default 0.1; SimPO's authors use 2.0-2.5)");
  schema.real("dpo.label_smoothing", 0.0, "robust and simpo: the assumed fraction of flipped labels, in [0, 0.5)");
  schema.real("dpo.simpo_gamma", 0.5, "simpo: the target reward margin gamma");
  schema.path("dpo.reference_model",
              "full fine-tuning: the frozen reference model's directory (default: model.path, where the policy "
              "starts); with LoRA the reference is the base with the adapters off and this key is refused");
  schema.choice("dpo.reference_dtype", {"bf16", "fp32"}, "bf16",
                "full fine-tuning: the frozen reference copy's storage (bf16 halves it)");
  schema.boolean("dpo.precompute_reference", false,
                 "compute the reference's log-probs of every pair once, before training, and store them in "
                 "RUN/reference_logps.safetensors (reused by --resume): training then holds no reference copy and runs "
                 "no reference forward (TRL's precompute_ref_log_probs)");
  schema.integer("data.max_length", 1024,
                 "tokens of prompt + completion; longer completions are cut at the end (TRL's keep_start), and "
                 "pairs whose prompt alone fills it are dropped and counted");
  schema.boolean("data.packing", true,
                 "pack each batch's chosen and rejected sequences into as few rows as fit its width, without padding "
                 "(attention kept within each sequence); false: one right-padded row per sequence, as TRL");
  schema.real("optimizer.lr", 5e-6, "peak learning rate (AdamW; preference tuning moves less than SFT: TRL 1e-6, LoRA 5e-6)");
  return schema;
}

DpoSettings read_dpo_settings(const config::Config& config) {
  DpoSettings settings;
  settings.sft = sft::read_sft_settings(config);
  settings.loss.type = train::preference_loss_from_name(config.get_string("dpo.loss"));
  settings.loss.beta = config.get_real("dpo.beta");
  settings.loss.label_smoothing = config.get_real("dpo.label_smoothing");
  settings.loss.simpo_gamma = config.get_real("dpo.simpo_gamma");
  const auto type = settings.loss.type;
  if (!(settings.loss.beta > 0)) config.fail("dpo.beta", fmt::format("must be > 0, got {}", settings.loss.beta));
  const bool smoothed = type == train::PreferenceLossType::robust || type == train::PreferenceLossType::simpo;
  if (settings.loss.label_smoothing != 0.0 && !smoothed) {
    config.fail("dpo.label_smoothing", fmt::format("is {}, but only dpo.loss robust and simpo use it (dpo.loss is "
                                                   "{}); remove it", settings.loss.label_smoothing,
                                                   config.get_string("dpo.loss")));
  }
  if (settings.loss.label_smoothing < 0 || settings.loss.label_smoothing >= 0.5) {
    config.fail("dpo.label_smoothing", "must be in [0, 0.5)");
  }
  if (settings.loss.simpo_gamma != 0.5 && type != train::PreferenceLossType::simpo) {
    config.fail("dpo.simpo_gamma", "is only used by dpo.loss simpo; remove it");
  }
  if (config.has("dpo.reference_model")) {
    if (!settings.uses_reference()) {
      config.fail("dpo.reference_model", fmt::format("is set, but dpo.loss {} needs no reference model; remove it",
                                                     config.get_string("dpo.loss")));
    }
    if (settings.reference_is_base()) {
      config.fail("dpo.reference_model", "is set, but with LoRA the reference is the base model with the adapters "
                                         "switched off (no second copy); remove it, or fine-tune fully (lora.rank 0)");
    }
    settings.reference_path = config.get_string("dpo.reference_model");
  }
  settings.reference_bf16 = config.get_string("dpo.reference_dtype") == "bf16";
  settings.precompute_reference = config.get_bool("dpo.precompute_reference");
  if (settings.precompute_reference && !settings.uses_reference()) {
    config.fail("dpo.precompute_reference", fmt::format("is true, but dpo.loss {} needs no reference model; remove it",
                                                        config.get_string("dpo.loss")));
  }
  if (!settings.reference_bf16 && settings.reference_is_base()) {
    config.fail("dpo.reference_dtype", "is fp32, but with LoRA the reference is the base model with the adapters "
                                       "switched off (stored as param_dtype says); remove it");
  }
  return settings;
}

void validate_dpo_config(const config::Config& config) {
  (void)read_run_settings(config);
  (void)read_training_settings(config);
  (void)read_distributed_settings(config);
  const DpoSettings settings = read_dpo_settings(config);
  validate_shard_blocks(config, {models::LlamaForCausalLMImpl::block_type()});
  if (read_run_settings(config).frozen_weights_bf16 && settings.sft.model.lora.lora.rank == 0) {
    config.fail("param_dtype", "is 'bf16', which stores frozen weights in bf16, but full fine-tuning trains every "
                               "weight (kept in fp32); use it with lora.rank > 0 (the reference copy of a full "
                               "fine-tune is set by dpo.reference_dtype)");
  }
  if (!settings.sft.model.path) {
    config.fail("model.path", "is required by dpo: preference tuning starts from a trained model (an SFT run's "
                              "export, or a Hugging Face model directory)");
  }
  if (config.get_string("data.format") != "auto") {
    config.fail("data.format", "is not used by dpo (preference rows are told apart by their fields: prompt, chosen, "
                               "rejected); remove it");
  }
  if (config.get_bool("data.train_on_prompt")) {
    config.fail("data.train_on_prompt", "is not used by dpo (only completions are scored); remove it");
  }
}

}  // namespace tune::recipes::dpo
