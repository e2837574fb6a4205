// The SFT schema and its translation into SftSettings; semantic checks that span keys live here.
#include "tune/recipes/sft/sft_settings.h"

#include <cmath>

#include "tune/recipes/common_schema.h"

namespace tune::recipes::sft {
namespace {

// Architecture keys for a model initialised from scratch; their defaults describe a tiny Llama.
const std::vector<std::string> kArchitectureKeys = {
    "model.vocab_size",        "model.hidden_size",        "model.intermediate_size",
    "model.num_hidden_layers", "model.num_attention_heads", "model.num_key_value_heads",
    "model.max_position_embeddings", "model.rope_theta",    "model.rms_norm_eps",
    "model.tie_word_embeddings"};

models::LlamaConfig read_architecture(const config::Config& config) {
  models::LlamaConfig arch;
  auto required = [&](const std::string& key) {
    if (!config.has(key)) config.fail(key, "is required to initialise a model from scratch (model.path is unset)");
    return get_int_at_least(config, key, 1);
  };
  arch.vocab_size = config.has("model.vocab_size") ? config.get_int("model.vocab_size") : 0;
  arch.hidden_size = required("model.hidden_size");
  arch.intermediate_size = required("model.intermediate_size");
  arch.num_hidden_layers = required("model.num_hidden_layers");
  arch.num_attention_heads = required("model.num_attention_heads");
  arch.num_key_value_heads =
      config.has("model.num_key_value_heads") ? required("model.num_key_value_heads") : arch.num_attention_heads;
  if (config.has("model.max_position_embeddings")) arch.max_position_embeddings = required("model.max_position_embeddings");
  // The same ranges as a config.json's (models/llama_config.cpp): a from-scratch model is held to them too.
  auto positive_real = [&](const std::string& key, double fallback) {
    if (!config.has(key)) return fallback;
    const double value = config.get_real(key);
    if (!(value > 0) || !std::isfinite(value)) config.fail(key, fmt::format("must be a positive number, got {}", value));
    return value;
  };
  arch.rope_theta = positive_real("model.rope_theta", arch.rope_theta);
  arch.rms_norm_eps = positive_real("model.rms_norm_eps", arch.rms_norm_eps);
  if (arch.vocab_size < 0) config.fail("model.vocab_size", fmt::format("must be >= 1 (0 or unset: the tokenizer's), got {}", arch.vocab_size));
  if (config.has("model.tie_word_embeddings")) arch.tie_word_embeddings = config.get_bool("model.tie_word_embeddings");
  if (arch.hidden_size % arch.num_attention_heads != 0) {
    config.fail("model.hidden_size", fmt::format("({}) must be divisible by model.num_attention_heads ({})",
                                                 arch.hidden_size, arch.num_attention_heads));
  }
  if (arch.num_attention_heads % arch.num_key_value_heads != 0) {
    config.fail("model.num_key_value_heads", fmt::format("({}) must divide model.num_attention_heads ({})",
                                                         arch.num_key_value_heads, arch.num_attention_heads));
  }
  if ((arch.hidden_size / arch.num_attention_heads) % 2 != 0) {
    config.fail("model.hidden_size", fmt::format("/ model.num_attention_heads gives an odd head dimension ({}); "
                                                 "rotary embeddings need an even one",
                                                 arch.hidden_size / arch.num_attention_heads));
  }
  return arch;
}

}  // namespace

config::Schema sft_schema() {
  config::Schema schema = common_schema("sft");
  schema.path("model.path", "Hugging Face model directory (config.json + safetensors); unset = random init");
  // Architecture keys have no schema default: they are set only by the user, so a resolved config.yaml never
  // carries them next to model.path, and a run from scratch states its architecture explicitly.
  auto optional_key = [&](const std::string& key, config::ValueType type, const std::string& help) {
    schema.add({key, type, std::nullopt, false, {}, help});
  };
  optional_key("model.vocab_size", config::ValueType::integer, "random init: vocabulary size (default: the tokenizer's)");
  optional_key("model.hidden_size", config::ValueType::integer, "random init: hidden size (required)");
  optional_key("model.intermediate_size", config::ValueType::integer, "random init: MLP size (required)");
  optional_key("model.num_hidden_layers", config::ValueType::integer, "random init: decoder layers (required)");
  optional_key("model.num_attention_heads", config::ValueType::integer, "random init: attention heads (required)");
  optional_key("model.num_key_value_heads", config::ValueType::integer,
               "random init: key/value heads, < heads for grouped-query attention (default: = heads)");
  optional_key("model.max_position_embeddings", config::ValueType::integer, "random init: context length (default 2048)");
  optional_key("model.rope_theta", config::ValueType::real, "random init: RoPE base (default 10000)");
  optional_key("model.rms_norm_eps", config::ValueType::real, "random init: RMSNorm epsilon (default 1e-6)");
  optional_key("model.tie_word_embeddings", config::ValueType::boolean,
               "random init: share embed_tokens and lm_head (default false)");
  schema.path("tokenizer", "tokenizer.json, sentencepiece tokenizer.model, or a directory holding one; default: "
                           "<model.path> (tokenizer.json preferred)");

  schema.integer("lora.rank", 0, "LoRA rank; 0 = full fine-tuning");
  schema.real("lora.alpha", 16.0, "LoRA scaling numerator (scaling = alpha / rank)");
  schema.real("lora.dropout", 0.0, "dropout on the LoRA input");
  schema.string_list("lora.target_modules", {"q_proj", "v_proj"},
                     "projections that get adapters: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, or [all-linear]");
  schema.choice("lora.quantize_base", {"none", "nf4"}, "none",
                "QLoRA: nf4 stores every projection weight of the decoder layers (adapted or not) in bitsandbytes' "
                "4-bit NormalFloat as the model loads (about 0.53 bytes per parameter); embeddings, norms and "
                "lm_head stay in param_dtype. Needs lora.rank > 0");
  schema.boolean("lora.double_quant", true,
                 "with lora.quantize_base nf4: quantise the block absmaxes again (bitsandbytes' "
                 "bnb_4bit_use_double_quant; 0.127 instead of 0.5 bits per parameter of statistics)");

  // Required by `tune train` (sft_train.cpp) but not by tune infer, chat or export, which need no training data.
  schema.add({"data.train", config::ValueType::weighted_paths, std::nullopt, false, {},
      "training data (required to train): a file, or a list of files and {path: FILE, weight: W} entries mixed by weight; W (> 0, "
      "default 1) is how many passes over that file one epoch makes, fractions allowed: each epoch takes "
      "round(W x rows) of the file's rows (at least 1), the whole file as often as that fits and the rest drawn "
      "afresh, continuing through the file from epoch to epoch. Files: JSONL, a JSON array (.json, as "
      "alpaca_data.json), or with format text also .txt (one document per file)"});
  schema.path("data.eval", "evaluation file (any layout data.train takes); unset = hold out data.eval_fraction of "
                           "data.train's rows (of all files together; evaluation is not weighted)");
  schema.real("data.eval_fraction", 0.02, "held-out fraction of data.train when data.eval is unset");
  schema.choice("data.format", {"auto", "instruction", "chat", "sharegpt", "text"}, "auto",
                "row format: instruction (Alpaca: instruction, input, output), chat (messages: [{role, content}]), "
                "sharegpt (conversations: [{from: human|gpt|system, value}]), auto = by the fields present; text = "
                "raw text for continued pre-training ({\"text\": ...} rows or .txt files): BOS + document + EOS, loss "
                "on every token, documents longer than max_length split into consecutive chunks (not truncated); "
                "no chat template (data.template and data.train_on_prompt stay unset)");
  schema.choice("data.template", data::ChatTemplate::names(), "auto",
                "chat template; auto = the model's own (tokenizer_config.json chat_template) when it has one, else "
                "plain; none = the messages back to back (base models); not used with format text");
  schema.integer("data.max_length", 512,
                 "tokens per row; longer conversations are truncated, longer text documents (format text) split");
  schema.boolean("data.packing", true, "pack several samples per row (attention kept within each sample)");
  schema.boolean("data.train_on_prompt", false, "also compute the loss on prompt tokens (format text: always)");
  schema.boolean("data.shuffle", true, "seeded shuffle each epoch");
  schema.choice("data.on_bad_line", {"fail", "skip"}, "fail",
                "a malformed row stops the run before training (naming file:line or file:index N), or is skipped: "
                "one summary per file (skipped K of N rows, the first reasons); no usable row is still an error");

  schema.boolean("training.chunked_loss", false,
                 "the loss fused with the output projection, in chunks (never the whole [tokens, vocab] logits): "
                 "GiBs less at large vocabularies, a few % slower where memory is not short (docs/BENCHMARKS.md); "
                 "not with distributed.strategy full_shard");
  schema.boolean("training.cuda_graph", false,
                 "capture the whole optimizer step into a CUDA graph once and replay it (one launch per step: faster "
                 "where the host's launches set the pace, e.g. LoRA at small batches); batches are padded to "
                 "batch_size rows x data.max_length tokens; one CUDA process, bf16 or fp32, no lora.dropout");
  schema.integer("eval.every", 0, "evaluate every N steps; 0 = only at the end");
  schema.integer("generation.max_new_tokens", 64, "tune infer: tokens to generate at most");
  schema.real("generation.temperature", 0.0, "tune infer: 0 = greedy");
  schema.real("generation.top_p", 1.0, "tune infer: nucleus sampling threshold");
  return schema;
}

SftSettings read_sft_settings(const config::Config& config) {
  SftSettings settings;
  if (config.has("model.path")) {
    settings.model.path = config.get_string("model.path");
    for (const auto& key : kArchitectureKeys) {
      if (config.has(key)) {
        config.fail(key, "sets the architecture of a randomly initialised model, but model.path is set and its "
                         "config.json defines the architecture; remove one of them");
      }
    }
  } else {
    settings.model.architecture = read_architecture(config);
  }
  if (config.has("tokenizer")) settings.tokenizer_path = config.get_string("tokenizer");
  if (!settings.tokenizer_path && !settings.model.path) {
    config.fail("tokenizer", "is required when model.path is unset (a randomly initialised model has no tokenizer)");
  }

  auto& lora = settings.model.lora;
  lora.lora.rank = get_int_at_least(config, "lora.rank", 0);
  lora.lora.alpha = config.get_real("lora.alpha");
  lora.lora.dropout = config.get_real("lora.dropout");
  lora.target_modules = config.get_strings("lora.target_modules");
  if (lora.lora.dropout < 0 || lora.lora.dropout >= 1) config.fail("lora.dropout", "must be in [0, 1)");
  static const std::vector<std::string> kTargets = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};
  // PEFT's "all-linear": every projection of the decoder layers (not lm_head).
  if (lora.target_modules == std::vector<std::string>{"all-linear"}) lora.target_modules = kTargets;
  for (const auto& target : lora.target_modules) {
    if (std::find(kTargets.begin(), kTargets.end(), target) == kTargets.end()) {
      config.fail("lora.target_modules", fmt::format("has unknown module '{}'; valid: q_proj, k_proj, v_proj, "
                                                     "o_proj, gate_proj, up_proj, down_proj", target));
    }
  }
  if (lora.lora.rank > 0 && lora.target_modules.empty()) config.fail("lora.target_modules", "must not be empty");
  // A key that would be ignored is refused (the default is accepted: a run's config.yaml writes every key).
  const bool quantize_base = config.get_string("lora.quantize_base") == "nf4";
  lora.double_quant = config.get_bool("lora.double_quant");
  if (quantize_base && lora.lora.rank == 0) {
    config.fail("lora.quantize_base", "is nf4, which quantises the frozen base of a LoRA run, but lora.rank is 0 "
                                      "(full fine-tuning trains every weight, and NF4 weights cannot train); set "
                                      "lora.rank > 0, or lora.quantize_base: none");
  }
  if (!quantize_base && !lora.double_quant) {
    config.fail("lora.double_quant", "is false, but it only acts with lora.quantize_base: nf4; remove it or set "
                                     "lora.quantize_base: nf4");
  }
  if (quantize_base) lora.nf4_modules = kTargets;
  if (lora.lora.rank > 0 && !settings.model.path) {
    config.fail("lora.rank", "LoRA adapts a pretrained model: set model.path to a Hugging Face model directory "
                             "(or a full fine-tuning checkpoint), or use lora.rank: 0 for full fine-tuning");
  }

  settings.chunked_loss = config.get_bool("training.chunked_loss");
  if (settings.chunked_loss && config.get_string("distributed.strategy") == "full_shard") {
    config.fail("training.chunked_loss", "is not supported with distributed.strategy full_shard (the output "
                                         "weight stays sharded outside the model's forward); use ddp or "
                                         "shard_grad_op, or training.chunked_loss=false");
  }

  settings.cuda_graph = config.get_bool("training.cuda_graph");

  auto& data_settings = settings.data;
  if (config.has("data.train")) {
    for (const auto& file : config.get_weighted_paths("data.train")) data_settings.train.push_back({file.path, file.weight});
  }
  if (config.has("data.eval")) data_settings.eval_path = config.get_string("data.eval");
  data_settings.eval_fraction = config.get_real("data.eval_fraction");
  if (data_settings.eval_fraction < 0 || data_settings.eval_fraction >= 1) {
    config.fail("data.eval_fraction", "must be in [0, 1)");
  }
  const std::string format = config.get_string("data.format");
  data_settings.format = format == "instruction" ? data::DataFormat::instruction
                         : format == "chat"      ? data::DataFormat::chat
                         : format == "sharegpt"  ? data::DataFormat::sharegpt
                         : format == "text"      ? data::DataFormat::text
                                                 : data::DataFormat::automatic;
  // Raw text has no template and no prompt. A key that would be ignored is refused; the defaults are accepted,
  // since a run's resolved config.yaml (resume, infer) writes every key.
  if (data_settings.format == data::DataFormat::text) {
    if (config.get_string("data.template") != "auto") {
      config.fail("data.template", "is not used with data.format: text (raw text is tokenized as it is, BOS and EOS "
                                   "around each document); remove it");
    }
    if (config.get_bool("data.train_on_prompt")) {
      config.fail("data.train_on_prompt", "is not used with data.format: text (the loss covers every token); "
                                          "remove it");
    }
  }
  data_settings.chat_template = config.get_string("data.template");
  data_settings.max_length = get_int_at_least(config, "data.max_length", 2);
  data_settings.packing = config.get_bool("data.packing");
  data_settings.train_on_prompt = config.get_bool("data.train_on_prompt");
  data_settings.shuffle = config.get_bool("data.shuffle");
  data_settings.on_bad_line =
      config.get_string("data.on_bad_line") == "skip" ? data::OnBadLine::skip : data::OnBadLine::fail;

  settings.generation.max_new_tokens = config.get_int("generation.max_new_tokens");
  settings.generation.temperature = config.get_real("generation.temperature");
  settings.generation.top_p = config.get_real("generation.top_p");
  if (settings.generation.top_p <= 0 || settings.generation.top_p > 1) config.fail("generation.top_p", "must be in (0, 1]");
  if (settings.generation.temperature < 0) config.fail("generation.temperature", "must be >= 0");
  return settings;
}

}  // namespace tune::recipes::sft
