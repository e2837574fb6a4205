// Writing and reading SFT checkpoint directories.
#include "tune/recipes/sft/sft_checkpoint.h"

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/models/generation_config.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/sft/peft_config.h"
#include "tune/recipes/sft/sft_model.h"

namespace tune::recipes::sft {

// Either adapter file tells: a LoRA checkpoint that lost one of them is then reported as damaged, not misread
// as a full one that lacks model.safetensors.
bool is_lora_checkpoint(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "adapter_config.json") || std::filesystem::exists(dir / "adapter_model.safetensors");
}

std::vector<std::string> checkpoint_weight_files(const std::filesystem::path& dir) {
  if (is_lora_checkpoint(dir)) return {"adapter_model.safetensors", "adapter_config.json"};
  return {"model.safetensors", "config.json"};
}

void write_checkpoint(const std::filesystem::path& dir, const models::LlamaForCausalLM& model,
                      const data::Tokenizer& tokenizer, const std::string& base_model_path,
                      const train::AdamW* optimizer, const TrainerState& state, bool optimizer_state_sharded) {
  std::filesystem::create_directories(dir);
  const auto weights = weights_to_save(model);
  if (model->has_lora()) {
    io::save_safetensors(dir / "adapter_model.safetensors", weights, {{"format", "pt"}});
    write_json_file(dir / "adapter_config.json", peft_adapter_config(model->lora_options(), base_model_path));
  } else {
    io::save_safetensors(dir / "model.safetensors", weights, {{"format", "pt"}});
    write_json_file(dir / "config.json", model->config().to_json());
  }
  // The tokenizer travels with every checkpoint so the directory is self-contained for inference and export, and
  // so does the base model's generation_config.json (its stop tokens).
  for (const auto& file : tokenizer.files()) {
    std::filesystem::copy_file(file, dir / file.filename(), std::filesystem::copy_options::overwrite_existing);
  }
  const auto generation_config = std::filesystem::path(base_model_path) / models::kGenerationConfigFile;
  if (!base_model_path.empty() && std::filesystem::exists(generation_config)) {
    std::filesystem::copy_file(generation_config, dir / models::kGenerationConfigFile,
                               std::filesystem::copy_options::overwrite_existing);
  }
  if (optimizer == nullptr) return;
  if (!optimizer_state_sharded) io::save_safetensors(dir / kOptimizerStateFile, optimizer->state_tensors());
  io::save_safetensors(dir / "rng_state.safetensors", {{"cpu", cpu_rng_state()}});
  nlohmann::json trainer_state = trainer_progress_json(state);
  trainer_state["tokens_seen"] = state.tokens_seen;
  trainer_state["adapter"] = model->has_lora();
  write_json_file(dir / "trainer_state.json", trainer_state);
}

void load_checkpoint_weights(const std::filesystem::path& dir, models::LlamaForCausalLM& model) {
  if (is_lora_checkpoint(dir)) {
    if (!model->has_lora()) {
      throw InputError(fmt::format("{}: holds a LoRA adapter but the model was built without LoRA", dir.string()));
    }
    require_checkpoint_files(dir, checkpoint_weight_files(dir));
    io::LoadOptions options;
    options.prefix = "base_model.model.";
    // Only adapter tensors are in the file: every base weight is expected to be missing from it.
    options.ignore_missing_containing = {""};
    const size_t loaded =
        io::load_into_module(*model, io::WeightSource::open_file(dir / "adapter_model.safetensors"), options);
    if (loaded == 0) throw InputError(fmt::format("{}: adapter_model.safetensors holds no LoRA tensors", dir.string()));
  } else {
    load_model_weights(model, dir);
  }
}

TrainerState read_checkpoint(const std::filesystem::path& dir, models::LlamaForCausalLM& model, train::AdamW& optimizer,
                             const OptimizerStateReader& read_optimizer) {
  std::vector<std::string> needed = checkpoint_weight_files(dir);
  const auto optimizer_files = optimizer_state_files(dir);
  needed.insert(needed.end(), optimizer_files.begin(), optimizer_files.end());
  needed.insert(needed.end(), {"rng_state.safetensors", "trainer_state.json"});
  require_checkpoint_files(dir, needed);
  load_checkpoint_weights(dir, model);
  optimizer.load_state_tensors(read_optimizer ? read_optimizer(dir) : read_optimizer_state(dir, parameters_of(optimizer)));
  set_cpu_rng_state(io::SafetensorsFile::open(dir / "rng_state.safetensors").load("cpu"));

  TrainerState state;
  const nlohmann::json json = read_trainer_progress(dir, state);
  state.tokens_seen = io::JsonFields(json, (dir / "trainer_state.json").string()).integer("tokens_seen");
  return state;
}

}  // namespace tune::recipes::sft
