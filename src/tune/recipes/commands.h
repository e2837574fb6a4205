// The CLI's commands as functions: apps/tune/main.cpp parses arguments and calls these; each returns the exit code.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tune::recipes {

struct TrainArguments {
  std::filesystem::path recipe;
  std::vector<std::string> overrides;
  std::optional<std::filesystem::path> output_dir;
  bool resume = false;
  std::optional<std::filesystem::path> resume_from;  // --resume VALUE; unset with resume=true: output_dir
  int nproc = 0;                                     // --nproc N: launch N local worker processes (0: not given)
  std::vector<std::string> worker_command;           // this command line without --nproc (what workers run)
  std::optional<std::string> memory_budget;          // --memory-budget 16GiB: apply tune plan's choice (per process)
};

struct InferArguments {
  std::filesystem::path target;  // recipe YAML, run directory or Hugging Face model directory
  std::vector<std::string> overrides;
  std::string prompt;
  std::optional<std::filesystem::path> prompts_file;  // one prompt per line (JSON string or plain text)
  std::optional<bool> grad;      // --grad / --no-grad; unset: the config's grad_inference
  bool json = false;
  bool raw = false;              // --raw: the prompt as given, no chat template
  int64_t max_new_tokens = -1;
  double temperature = -1.0;
  double top_p = -1.0;
  std::optional<int64_t> class_label;
  std::optional<std::string> sampler;
  std::optional<int64_t> steps;
  std::optional<double> cfg_scale;
  std::optional<int64_t> num_samples;
  std::optional<std::filesystem::path> out;
  std::optional<std::string> negative_prompt;
  std::optional<int64_t> frames, height, width;
  std::optional<uint64_t> seed;                 // --seed: the config's seed key
  std::optional<std::filesystem::path> noise;
};

struct ExportArguments {
  std::filesystem::path checkpoint;  // run directory or checkpoint directory
  bool merge_lora = false;
  std::optional<std::filesystem::path> base;  // --base: the original-precision model to merge into
  std::filesystem::path out;
  std::string max_shard_size = "5GB";
};

struct PrepareArguments {
  std::filesystem::path recipe;
  std::vector<std::string> overrides;
  std::optional<std::filesystem::path> out;
  int64_t clips_per_video = 1;
};

struct TokenizeArguments {
  std::filesystem::path target;  // model directory, tokenizer.json, tokenizer.model, or a directory holding one
  std::optional<std::string> text;
  std::optional<std::filesystem::path> messages;  // JSON list of {role, content}
  std::string chat_template = "auto";
  bool add_generation_prompt = false;
  bool no_special = false;  // --text: without the leading special tokens (BOS)
  bool json = false;
};

struct PlanArguments {
  std::filesystem::path recipe;
  std::vector<std::string> overrides;
  std::string memory;  // --memory 16GiB: the budget per process
  int nproc = 1;       // --nproc N: data-parallel processes (ddp)
  bool json = false;
  bool infer = false;  // --infer: plan gradient-enabled sampling (tune infer --grad) instead of training
  std::vector<int64_t> frames;     // --frames 8,16 (with --infer): empty, the recipe's
  std::vector<std::string> sizes;  // --size 512,512x320 (WIDTHxHEIGHT or one side of a square): empty, the recipe's
};

int run_train(const TrainArguments& arguments);
int run_infer(const InferArguments& arguments);
int run_chat(const InferArguments& arguments);  // InferArguments' prompt options must be unset
int run_validate(const std::filesystem::path& recipe, const std::vector<std::string>& overrides);
int run_list();
int run_copy(const std::string& name, const std::filesystem::path& destination);
int run_export(const ExportArguments& arguments);
int run_prepare(const PrepareArguments& arguments);
int run_tokenize(const TokenizeArguments& arguments);
int run_plan(const PlanArguments& arguments);  // recipes/plan/plan_command.cpp

}  // namespace tune::recipes
