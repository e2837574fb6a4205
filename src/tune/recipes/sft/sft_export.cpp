// `tune export` for the SFT recipe: a checkpoint as a Hugging Face model directory (LoRA merged on request) or as
// a PEFT adapter directory, complete enough that transformers (and tune infer) use it as it was trained: weights in
// the model's own dtype (sharded above --max-shard-size), config.json, the tokenizer files, generation_config.json,
// and the chat template training used in tokenizer_config.json.
#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/model_chat_template.h"
#include "tune/io/dtypes.h"
#include "tune/io/json_file.h"
#include "tune/io/sharded_safetensors.h"
#include "tune/io/weights.h"
#include "tune/models/generation_config.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/sft/peft_config.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes::sft {
namespace {

namespace fs = std::filesystem;

void copy_into(const fs::path& from_dir, const fs::path& to_dir, const std::vector<std::string>& names) {
  for (const auto& name : names) fs::copy_file(from_dir / name, to_dir / name, fs::copy_options::overwrite_existing);
}

// The tokenizer files and generation_config.json the checkpoint holds.
void copy_model_side_files(const fs::path& from_dir, const fs::path& to_dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", models::kGenerationConfigFile}) {
    if (fs::exists(from_dir / name)) copy_into(from_dir, to_dir, {name});
  }
}

// config.json's torch_dtype as the dtype to write floating-point weights in (training keeps fp32 master weights; a
// bf16 model is handed back in bf16). Anything else ("auto", absent) keeps fp32.
torch::ScalarType export_dtype(const models::LlamaConfig& config) {
  if (config.torch_dtype == "bfloat16") return torch::kBFloat16;
  if (config.torch_dtype == "float16") return torch::kFloat16;
  if (config.torch_dtype != "float32") {
    log::warn("config.json torch_dtype '{}' is not float32, bfloat16 or float16: exporting float32", config.torch_dtype);
  }
  return torch::kFloat32;
}

// Writes tensors (name, shape, source dtype) in `dtype` (floating-point ones only) as model.safetensors or as
// shards with an index; `load` gives one tensor's data when its shard is written.
void write_weights(const fs::path& dir, std::vector<io::TensorToWrite> tensors,
                   const std::function<torch::Tensor(const std::string&)>& load, torch::ScalarType dtype,
                   uint64_t max_shard_bytes) {
  for (auto& tensor : tensors) {
    if (c10::isFloatingType(tensor.dtype)) tensor.dtype = dtype;
  }
  auto converted = [&](const std::string& name) {
    torch::Tensor tensor = load(name);
    return tensor.is_floating_point() ? tensor.to(dtype).contiguous() : tensor.contiguous();
  };
  const auto files = io::save_sharded_safetensors(dir, tensors, converted, max_shard_bytes);
  if (files.size() > 1) log::info("weights sharded into {} files (index: model.safetensors.index.json)", files.size() - 1);
}

// tokenizer_config.json gets the chat template training used, as Jinja text for transformers; for tune's built-ins
// also its name, so tune infer on the export uses the built-in itself (identical tokens to training).
void write_chat_template(const fs::path& dir, const data::ChatTemplate& chat, const data::Tokenizer& tokenizer) {
  const auto path = dir / "tokenizer_config.json";
  nlohmann::json config = fs::exists(path) ? io::read_json_file(path, "the tokenizer_config.json") : nlohmann::json::object();
  config["chat_template"] = chat.jinja_source();
  if (chat.name() == "auto") {
    config.erase(data::kTuneChatTemplateKey);  // the model's own template stays the model's own
  } else {
    config[data::kTuneChatTemplateKey] = chat.name();
  }
  // The Jinja text names bos_token / eos_token; transformers takes them from here.
  if (!config.contains("bos_token") && tokenizer.bos_id() >= 0) config["bos_token"] = tokenizer.piece(tokenizer.bos_id());
  if (!config.contains("eos_token") && tokenizer.eos_id() >= 0) config["eos_token"] = tokenizer.piece(tokenizer.eos_id());
  io::write_json_file(path, config);
}

}  // namespace

int export_model(const ExportRequest& request) {
  const auto& checkpoint = request.checkpoint;
  if (fs::exists(request.out) && !fs::is_empty(request.out)) {
    throw UsageError(fmt::format("--out {} exists and is not empty; choose a new directory (nothing was written)",
                                 request.out.string()));
  }
  const bool lora = is_lora_checkpoint(checkpoint);
  if (request.base && !(lora && request.merge_lora)) {
    throw UsageError(fmt::format("--base {} names the model to merge a LoRA adapter into, so it needs --merge-lora and "
                                 "a LoRA checkpoint; {} {}", request.base->string(), checkpoint.string(),
                                 lora ? "was given without --merge-lora" : "is a full fine-tuning checkpoint"));
  }
  if (request.base && !fs::exists(*request.base / "config.json")) {
    throw UsageError(fmt::format("--base {}: no config.json there; --base takes a Hugging Face model directory (the "
                                 "original-precision model the run quantised from)", request.base->string()));
  }
  require_checkpoint_files(checkpoint, checkpoint_weight_files(checkpoint));
  SftSettings sft = read_sft_settings(request.config);
  sft.tokenizer_path = checkpoint.string();
  const auto tokenizer = load_tokenizer(sft);
  const auto chat = data::ChatTemplate::resolve(sft.data.chat_template, tokenizer);

  const fs::path temporary = request.out.string() + ".tmp";
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  if (!lora) {
    if (request.merge_lora) log::warn("{} is a full fine-tuning checkpoint: there is no LoRA adapter to merge", checkpoint.string());
    const auto config = models::LlamaConfig::from_file((checkpoint / "config.json").string());
    const auto weights = io::WeightSource::open_directory(checkpoint);
    std::vector<io::TensorToWrite> tensors;
    for (const auto& name : weights.names()) {
      const auto& entry = weights.file_of(name).entries().at(name);
      tensors.push_back({name, entry.shape, entry.dtype});
    }
    write_weights(temporary, tensors, [&](const std::string& name) { return weights.load(name); },
                  export_dtype(config), request.max_shard_bytes);
    copy_into(checkpoint, temporary, {"config.json"});
  } else if (!request.merge_lora) {
    copy_into(checkpoint, temporary, {"adapter_config.json", "adapter_model.safetensors"});
  } else {
    const auto nf4_modules = sft.model.lora.nf4_modules;
    const bool double_quant = sft.model.lora.double_quant;
    sft.model.lora = lora_from_peft_config(checkpoint / "adapter_config.json");
    if (request.base) {
      // The original-precision weights: the adapter's update lands on the values it was meant for, no NF4 error.
      sft.model.path = request.base->string();
    } else if (!nf4_modules.empty()) {
      // QLoRA without --base: the base the run trained on, dequantised. Its quantisation error is then part of the
      // exported weights, which is what the adapter saw in training but not what the original model holds.
      sft.model.lora.nf4_modules = nf4_modules;
      sft.model.lora.double_quant = double_quant;
      log::warn("merging into the dequantised NF4 base of {} (its quantisation error is baked into the exported "
                "weights); --base DIR merges into the original-precision model instead", checkpoint.string());
    }
    auto model = build_model(sft, tokenizer, 0);
    load_checkpoint_weights(checkpoint, model);
    std::map<std::string, torch::Tensor> merged;
    std::vector<io::TensorToWrite> tensors;
    for (auto& [name, tensor] : model->merged_state()) {
      tensors.push_back({name, tensor.sizes().vec(), tensor.scalar_type()});
      merged.emplace(name, tensor);
    }
    write_weights(temporary, tensors, [&](const std::string& name) { return merged.at(name); },
                  export_dtype(model->config()), request.max_shard_bytes);
    io::write_json_file(temporary / "config.json", model->config().to_json());
  }
  copy_model_side_files(checkpoint, temporary);
  write_chat_template(temporary, chat, tokenizer);
  fs::remove_all(request.out);
  fs::rename(temporary, request.out);
  log::info("exported {} to {} ({}, chat template {})", checkpoint.string(), request.out.string(),
            !lora ? "Hugging Face model"
            : request.merge_lora
                ? (request.base ? fmt::format("Hugging Face model, LoRA merged into {}", request.base->string())
                                : std::string("Hugging Face model, LoRA merged"))
                : "PEFT adapter",
            chat.name() == "auto" ? "the model's own" : chat.name());
  return 0;
}

}  // namespace tune::recipes::sft
