// Writing and reading video-diffusion checkpoints.
#include "tune/recipes/diffusion/diffusion_checkpoint.h"

#include <map>

#include "tune/io/safetensors.h"

namespace tune::recipes::diffusion_common {

void write_diffusion_checkpoint(const std::filesystem::path& dir, const DiffusionTrainingObjects& objects,
                                const TrainerProgress& state, bool optimizer_state_sharded) {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& item : objects.model->named_parameters()) {
    if (objects.trainable_only && !item.value().requires_grad()) continue;
    weights.emplace_back(item.key(), item.value().detach());
  }
  io::save_safetensors(dir / "model.safetensors", weights, {{"format", "pt"}});
  // The EMA file is a whole model state (frozen weights included), loadable like the model's published weights.
  const auto& ema_state = objects.ema_whole_state != nullptr ? *objects.ema_whole_state : objects.ema->state();
  std::map<std::string, torch::Tensor> averaged(ema_state.begin(), ema_state.end());
  std::vector<std::pair<std::string, torch::Tensor>> ema_weights;
  for (const auto& [name, tensor] : weights) {
    const auto found = averaged.find(name);
    ema_weights.emplace_back(name, found != averaged.end() ? found->second : tensor);
  }
  io::save_safetensors(dir / "ema.safetensors", ema_weights,
                       {{"format", "pt"}, {"ema_decay", std::to_string(objects.ema->decay())}});
  objects.save_config(dir);
  if (!optimizer_state_sharded) io::save_safetensors(dir / kOptimizerStateFile, objects.optimizer->state_tensors());
  io::save_safetensors(dir / "rng_state.safetensors",
                       {{"cpu", cpu_rng_state()}, {"diffusion", objects.noise_generator->get_state()}});
  write_json_file(dir / "trainer_state.json", trainer_progress_json(state));
}

TrainerProgress read_diffusion_checkpoint(const std::filesystem::path& dir, const DiffusionTrainingObjects& objects) {
  std::vector<std::string> needed = optimizer_state_files(dir);
  needed.insert(needed.end(), {"model.safetensors", "ema.safetensors", "rng_state.safetensors", "trainer_state.json"});
  require_checkpoint_files(dir, needed);
  objects.load_weights(dir / "model.safetensors");
  objects.optimizer->load_state_tensors(objects.read_optimizer ? objects.read_optimizer(dir)
                                                               : read_optimizer_state(dir, parameters_of(*objects.optimizer)));
  std::vector<std::pair<std::string, torch::Tensor>> ema_state;
  const auto parameters = objects.model->named_parameters();
  for (auto& [name, tensor] : read_named_tensors(dir / "ema.safetensors")) {
    if (parameters[name].requires_grad()) ema_state.emplace_back(name, tensor);
  }
  objects.ema->load_state(objects.ema_shard_state ? objects.ema_shard_state(ema_state) : ema_state);
  const auto rng = io::SafetensorsFile::open(dir / "rng_state.safetensors");
  set_cpu_rng_state(rng.load("cpu"));
  objects.noise_generator->set_state(rng.load("diffusion"));
  TrainerProgress state;
  read_trainer_progress(dir, state);
  return state;
}

std::filesystem::path sampling_weights_file(const std::filesystem::path& dir) {
  const auto ema = dir / "ema.safetensors";
  return std::filesystem::exists(ema) ? ema : dir / "model.safetensors";
}

}  // namespace tune::recipes::diffusion_common
