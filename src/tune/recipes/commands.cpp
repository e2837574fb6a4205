// Command implementations: resolve which recipe and config apply, then hand over to the recipe.
#include "tune/recipes/commands.h"

#include <fstream>
#include <iostream>

#include "tune/config/config.h"
#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/paths.h"
#include "tune/distributed/launch_environment.h"
#include "tune/distributed/local_launcher.h"
#include "tune/io/pipeline_index.h"
#include "tune/io/run_checkpoints.h"
#include "tune/io/sharded_safetensors.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/plan/plan_command.h"
#include "tune/recipes/recipe.h"

namespace tune::recipes {
namespace {

struct LoadedConfig {
  const Recipe* recipe = nullptr;
  config::Config config;
};

LoadedConfig load_recipe_config(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  if (!std::filesystem::is_regular_file(file)) {
    throw UsageError(fmt::format("{}: no such recipe file (see `tune ls` for the shipped recipes)", file.string()));
  }
  LoadedConfig loaded;
  loaded.recipe = &find_recipe(config::peek_recipe_name(file, overrides));
  loaded.config = config::load(file, overrides, loaded.recipe->schema());
  log::debug("config: {} (recipe {}, {} override(s))", file.string(), loaded.recipe->name, overrides.size());
  return loaded;
}

// The run directory a checkpoint directory belongs to (RUN/checkpoints/step-N).
std::filesystem::path run_dir_of_checkpoint(const std::filesystem::path& checkpoint) {
  return checkpoint.parent_path().parent_path();
}

// The run directory of `tune train FILE`: --output-dir; else, when FILE is a run's own config.yaml (beside its
// checkpoints/ folder), that run, wherever it was moved or copied; else the config's output_dir.
std::filesystem::path train_output_dir(const TrainArguments& arguments, const config::Config& config) {
  if (arguments.output_dir) return *arguments.output_dir;
  const auto& file = arguments.recipe;
  const auto folder = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  if (file.filename() == "config.yaml" && std::filesystem::is_directory(io::checkpoints_dir(folder))) return folder;
  return config.get_string("output_dir");
}

// First line of a YAML file's leading comment, for `tune ls`.
std::string description_of(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) {
      const auto start = line.find_first_not_of("# ");
      return start == std::string::npos ? "" : line.substr(start);
    }
    if (!line.empty()) break;
  }
  return "";
}

std::vector<std::filesystem::path> yaml_files_under(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> read_prompts(const InferArguments& arguments) {
  if (!arguments.prompts_file) return {arguments.prompt};
  std::ifstream in(*arguments.prompts_file);
  if (!in) throw UsageError(fmt::format("--prompts-file {}: cannot open", arguments.prompts_file->string()));
  std::vector<std::string> prompts;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.empty()) continue;
    if (line.front() != '"') {
      prompts.push_back(line);
      continue;
    }
    try {  // a JSON string literal lets a prompt contain newlines
      prompts.push_back(nlohmann::json::parse(line).get<std::string>());
    } catch (const nlohmann::json::exception& error) {
      throw UsageError(fmt::format("{}:{}: a line starting with '\"' must be a JSON string: {}",
                                   arguments.prompts_file->string(), line_number, error.what()));
    }
  }
  if (prompts.empty()) throw UsageError(fmt::format("--prompts-file {}: no prompts", arguments.prompts_file->string()));
  return prompts;
}

}  // namespace

int run_train(const TrainArguments& arguments) {
  // --memory-budget: the plan's choice joins the overrides before anything reads the config (plan_command.h).
  LoadedConfig loaded = load_recipe_config(arguments.recipe, apply_memory_budget(arguments));
  if (arguments.nproc > 1) {
    // The launcher checks the config once (errors print once, not once per worker), then becomes a supervisor.
    if (distributed::read_launch_environment()) {
      throw UsageError("--nproc was given inside a distributed launch (RANK/WORLD_SIZE or SLURM_PROCID are set): "
                       "let one launcher start the processes, torchrun/srun or --nproc, not both");
    }
    (void)read_distributed_settings(loaded.config);
    if (loaded.recipe->validate) loaded.recipe->validate(loaded.config);
    return distributed::launch_local_workers(arguments.nproc, arguments.worker_command);
  }
  join_distributed_run(loaded.config);
  std::filesystem::path output_dir = train_output_dir(arguments, loaded.config);
  std::optional<std::filesystem::path> resume_from;
  if (arguments.resume) {
    resume_from = io::resolve_resume_target(arguments.resume_from ? *arguments.resume_from : output_dir);
    if (arguments.resume_from && !arguments.output_dir) output_dir = run_dir_of_checkpoint(*resume_from);
  }
  // The run's config.yaml records where the run is, so that `tune train RUN/config.yaml --resume` (from anywhere a
  // relative output_dir resolves the same) finds this run and no other.
  if (output_dir.string() != loaded.config.get_string("output_dir")) {
    loaded.config.set_string("output_dir", output_dir.string(), "the run directory: " + output_dir.string());
  }
  return loaded.recipe->train(TrainRequest{loaded.config, output_dir, resume_from});
}

namespace {

// The recipe that samples from a diffusers pipeline directory, by model_index.json's _class_name.
std::string pipeline_recipe(const std::filesystem::path& pipeline_dir) {
  const auto index = io::read_pipeline_index(pipeline_dir);
  if (index.class_name == "LattePipeline") return "latte_t2v";
  if (index.class_name == "SanaPipeline") return "sana";
  throw InputError(fmt::format("{}: _class_name '{}' is a pipeline tune does not implement (it samples from "
                               "LattePipeline and SanaPipeline directories)",
                               index.file.string(), index.class_name));
}

// What `tune infer` and `tune chat` are pointed at: a run directory, a Latte or LLM model directory, or a recipe.
std::pair<const Recipe*, InferRequest> infer_request(const InferArguments& arguments) {
  InferRequest request;
  if (!arguments.prompt.empty() || arguments.prompts_file) request.prompts = read_prompts(arguments);
  request.class_label = arguments.class_label;
  request.sampler = arguments.sampler;
  request.steps = arguments.steps;
  request.cfg_scale = arguments.cfg_scale;
  request.num_samples = arguments.num_samples;
  request.out = arguments.out;
  request.negative_prompt = arguments.negative_prompt;
  request.frames = arguments.frames;
  request.height = arguments.height;
  request.width = arguments.width;
  request.noise = arguments.noise;
  request.json = arguments.json;
  request.raw = arguments.raw;
  request.max_new_tokens = arguments.max_new_tokens;
  request.temperature = arguments.temperature;
  request.top_p = arguments.top_p;
  const Recipe* recipe = nullptr;
  const auto& target = arguments.target;
  std::vector<std::string> user_overrides = arguments.overrides;
  if (arguments.seed) user_overrides.push_back("seed=" + std::to_string(*arguments.seed));
  const auto checkpoint_run = run_dir_of_checkpoint(target);
  if (std::filesystem::is_directory(target) && std::filesystem::exists(target / "config.yaml")) {
    LoadedConfig loaded = load_recipe_config(target / "config.yaml", user_overrides);  // a run directory
    recipe = loaded.recipe;
    request.config = loaded.config;
    request.run_dir = target;
  } else if (std::filesystem::is_directory(target) && target.parent_path().filename() == "checkpoints" &&
             std::filesystem::exists(checkpoint_run / "config.yaml")) {
    // One checkpoint of a run (RUN/checkpoints/step-N): the run's config with that checkpoint's weights. Checked
    // before config.json, which a diffusion checkpoint holds too (its transformer's), so it is never taken for an LLM.
    const std::filesystem::path checkpoint = io::resolve_resume_target(target);  // complete, or a UsageError
    LoadedConfig loaded = load_recipe_config(checkpoint_run / "config.yaml", user_overrides);
    recipe = loaded.recipe;
    request.config = loaded.config;
    request.run_dir = checkpoint_run;
    request.checkpoint = checkpoint;
  } else if (std::filesystem::is_directory(target) && std::filesystem::exists(target / "latte_config.json")) {
    // Latte weights (converted official ones, or a checkpoint), tested before config.json: never taken for an LLM.
    recipe = &find_recipe("latte");
    request.model_dir = target;
  } else if (io::is_pipeline_directory(target)) {
    // A diffusers pipeline directory (model_index.json): the recipe of its pipeline class with its defaults, the
    // directory as model.path, and the user's overrides.
    recipe = &find_recipe(pipeline_recipe(target));
    std::vector<std::string> overrides = {"recipe=" + recipe->name,
                                          "model.path=" + nlohmann::json(target.string()).dump()};
    overrides.insert(overrides.end(), user_overrides.begin(), user_overrides.end());
    request.config = config::load_overrides(overrides, recipe->schema(), "the pipeline directory " + target.string());
    request.model_dir = target;
  } else if (std::filesystem::is_directory(target) && std::filesystem::exists(target / "config.json")) {
    // A Hugging Face LLM directory: the SFT recipe's defaults, the directory as model.path, and the user's overrides
    // of run settings (precision, device, threads, checkpointing, generation), checked as a recipe's would be.
    recipe = &find_recipe("sft");
    // The path as a double-quoted scalar (JSON's escapes are YAML's), so any file name reads back as itself.
    std::vector<std::string> overrides = {"recipe=sft", "model.path=" + nlohmann::json(target.string()).dump()};
    overrides.insert(overrides.end(), user_overrides.begin(), user_overrides.end());
    request.config = config::load_overrides(overrides, recipe->schema(), "the model directory " + target.string());
    request.model_dir = target;
  } else if (std::filesystem::is_regular_file(target)) {
    LoadedConfig loaded = load_recipe_config(target, user_overrides);
    recipe = loaded.recipe;
    request.config = loaded.config;
    request.run_dir = std::filesystem::path(loaded.config.get_string("output_dir"));
  } else {
    throw UsageError(fmt::format("{}: expected a recipe YAML file, a run directory (with config.yaml) or one of its "
                                 "checkpoints, a Hugging Face model directory (with config.json) or a diffusers "
                                 "pipeline directory (with model_index.json)",
                                 target.string()));
  }
  request.grad = arguments.grad.value_or(request.config ? request.config->get_bool("grad_inference") : true);
  const bool text_to_media_flags = request.negative_prompt || request.frames || request.height || request.width ||
                                    request.noise;
  if (text_to_media_flags && recipe->name != "latte_t2v" && recipe->name != "sana") {
    throw UsageError(fmt::format("--negative-prompt, --frames, --height, --width and --noise apply to text-to-video "
                                 "and text-to-image pipelines (recipes latte_t2v, sana); {} is recipe {}",
                                 target.string(), recipe->name));
  }
  return {recipe, std::move(request)};
}

}  // namespace

int run_infer(const InferArguments& arguments) {
  auto [recipe, request] = infer_request(arguments);
  return recipe->infer(request);
}

int run_chat(const InferArguments& arguments) {
  auto [recipe, request] = infer_request(arguments);
  if (!recipe->chat) {
    throw UsageError(fmt::format("tune chat is for LLMs; {} is a {} model (use tune infer)", arguments.target.string(),
                                 recipe->name));
  }
  request.grad = arguments.grad.value_or(false);  // attribution after every answer only when asked (--grad or /grad)
  return recipe->chat(request);
}

int run_validate(const std::filesystem::path& recipe, const std::vector<std::string>& overrides) {
  LoadedConfig loaded = load_recipe_config(recipe, overrides);
  // Beyond keys and types: the settings every recipe reads (ranges, combinations), and the recipe's own checks
  // (Recipe::validate: its keys' ranges, distributed.shard_blocks against its block types), as `tune train` makes
  // them. Only what needs the data or the model's files (rows, a config.json) is left to training.
  (void)read_run_settings(loaded.config);
  (void)read_training_settings(loaded.config);
  (void)read_distributed_settings(loaded.config);
  if (loaded.recipe->validate) loaded.recipe->validate(loaded.config);
  std::cout << loaded.config.to_yaml();
  return 0;
}

int run_list() {
  std::cout << "recipes (tune train recipes/NAME.yaml, or tune cp NAME DEST to edit a copy):\n";
  for (const auto& file : yaml_files_under(shipped_recipes_dir())) {
    std::cout << fmt::format("  {:<24} {}\n", file.stem().string(), description_of(file));
  }
  std::cout << "\npresets (include: them from a recipe):\n";
  for (const auto& file : yaml_files_under(shipped_configs_dir())) {
    const auto relative = std::filesystem::relative(file, shipped_configs_dir()).replace_extension("");
    std::cout << fmt::format("  {:<24} {}\n", relative.string(), description_of(file));
  }
  return 0;
}

int run_copy(const std::string& name, const std::filesystem::path& destination) {
  std::filesystem::path source;
  for (const auto& candidate : {shipped_recipes_dir() / (name + ".yaml"), shipped_configs_dir() / (name + ".yaml"),
                                shipped_recipes_dir() / name, shipped_configs_dir() / name}) {
    if (std::filesystem::is_regular_file(candidate)) {
      source = candidate;
      break;
    }
  }
  if (source.empty()) throw UsageError(fmt::format("no shipped recipe or preset named '{}' (see `tune ls`)", name));
  auto target = destination;
  if (std::filesystem::is_directory(target)) target /= source.filename();
  if (std::filesystem::exists(target)) {
    throw UsageError(fmt::format("{} already exists; choose another destination (nothing was overwritten)", target.string()));
  }
  std::filesystem::copy_file(source, target);
  std::cout << fmt::format("copied {} to {}\n", source.string(), target.string());
  return 0;
}

int run_export(const ExportArguments& arguments) {
  const auto checkpoint = io::resolve_resume_target(arguments.checkpoint);
  const auto config_file = run_dir_of_checkpoint(checkpoint) / "config.yaml";
  LoadedConfig loaded = load_recipe_config(config_file, {});
  const auto max_shard_bytes = io::parse_byte_size(arguments.max_shard_size);
  if (!max_shard_bytes || *max_shard_bytes == 0) {
    throw UsageError(fmt::format("--max-shard-size '{}': expected a size such as 5GB, 500MB or 2GiB",
                                 arguments.max_shard_size));
  }
  ExportRequest request{checkpoint, loaded.config};
  request.merge_lora = arguments.merge_lora;
  request.base = arguments.base;
  request.out = arguments.out;
  request.max_shard_bytes = *max_shard_bytes;
  return loaded.recipe->export_model(request);
}

int run_prepare(const PrepareArguments& arguments) {
  LoadedConfig loaded = load_recipe_config(arguments.recipe, arguments.overrides);
  if (!loaded.recipe->prepare) {
    throw UsageError(fmt::format("recipe '{}' has nothing to prepare: tune prepare precomputes VAE latents for video "
                                 "recipes (latte)", loaded.recipe->name));
  }
  return loaded.recipe->prepare({loaded.config, arguments.out, arguments.clips_per_video});
}

}  // namespace tune::recipes
