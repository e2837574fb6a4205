// tune: the command line. Registers the subcommands, parses, and hands over to src/tune/recipes/commands.h.
// Errors caused by the user print one clear message and exit 2 (usage/config) or 1 (runtime), never a stack trace.
#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/version.h>

#include <cstdio>
#include <filesystem>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/video_reader.h"
#include "tune/recipes/commands.h"

namespace {

// What a --nproc worker runs: this very command line minus `--nproc N` / `--nproc=N` (argv[0] is kept as given; the
// launcher executes /proc/self/exe, so a relative argv[0] does not matter).
std::vector<std::string> command_line_without_nproc(int argc, char** argv) {
  std::vector<std::string> arguments;
  for (int i = 0; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--nproc") {
      ++i;
      continue;
    }
    if (argument.rfind("--nproc=", 0) == 0) continue;
    arguments.push_back(argument);
  }
  return arguments;
}

// A count such as --nproc N: a whole number >= 1 (CLI11's PositiveNumber, rejecting a value, prints its bound,
// 1.8e308, in full).
CLI::Validator count_of(const std::string& what) {
  return CLI::Validator(
      [what](std::string& value) -> std::string {
        try {
          size_t end = 0;
          const long long count = std::stoll(value, &end);
          if (end == value.size() && count >= 1 && count <= 1'000'000) return "";
        } catch (const std::exception&) {
        }
        return "expected a whole number of " + what + " >= 1, got '" + value + "'";
      },
      "N >= 1");
}

int report(const char* kind, const std::string& message, int exit_code) {
  // Ranks other than 0 name themselves, as their log lines do: every rank may fail with the same message.
  if (tune::log::rank() != 0) std::fprintf(stderr, "[rank %d] ", tune::log::rank());
  std::fprintf(stderr, "%s: %s\n", kind, message.c_str());
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tune::recipes;
  CLI::App app{"tune: fine-tune LLMs and video diffusion models from a YAML recipe"};
  app.require_subcommand(1);
  // What this build can do: tests and users ask it (tests/cli/cli_tests.sh skips video cases without FFmpeg).
#if defined(TUNE_WITH_CUDA)
  constexpr const char* kCudaBuild = "yes";
#else
  constexpr const char* kCudaBuild = "no";
#endif
  app.set_version_flag("--version", fmt::format("tune 0.1.0 (LibTorch {}, CUDA build: {}, video: {})", TORCH_VERSION,
                                                kCudaBuild, tune::data::video_support_available() ? "yes" : "no"));

  // Verbosity, accepted before or after the subcommand (fallthrough): tune -q train R.yaml, tune train R.yaml -v.
  bool verbose = false, quiet = false;
  auto* verbose_flag = app.add_flag("-v,--verbose", verbose, "also print debug lines (files read, choices made)");
  app.add_flag("-q,--quiet", quiet, "print only warnings and errors (no progress, no plan)")->excludes(verbose_flag);
  app.fallthrough();

  TrainArguments train;
  std::string resume_value;
  auto* train_command = app.add_subcommand("train", "run a recipe: tune train RECIPE.yaml [key=value ...]");
  train_command->add_option("recipe", train.recipe, "recipe YAML (or a run's config.yaml)")->required();
  train_command->add_option("overrides", train.overrides, "key=value overrides, e.g. optimizer.lr=1e-4");
  train_command->add_option("--output-dir", train.output_dir, "run directory (default: the config's output_dir)");
  auto* resume_option = train_command->add_option(
      "--resume", resume_value, "continue from the newest complete checkpoint of the run (or of RUN_OR_CHECKPOINT)");
  resume_option->expected(0, 1);
  train_command->add_option("--nproc", train.nproc,
                            "launch N worker processes on this machine (data-parallel; see distributed.* keys)")
      ->check(count_of("processes"));
  train_command->add_option("--memory-budget", train.memory_budget,
                            "apply tune plan's choice for this memory per process (e.g. 16GiB): checkpointing policy, "
                            "micro-batch and accumulation, param_dtype; written into the run's config.yaml");

  InferArguments infer;
  bool grad = false;
  bool no_grad = false;
  auto* infer_command = app.add_subcommand("infer", "generate from a recipe, a run directory or a model directory");
  infer_command->add_option("target", infer.target, "RECIPE.yaml | RUN_DIR | RUN_DIR/checkpoints/step-N | MODEL_DIR")->required();
  infer_command->add_option("overrides", infer.overrides, "key=value overrides");
  auto* prompt_option = infer_command->add_option("--prompt", infer.prompt, "the user message");
  infer_command->add_option("--prompts-file", infer.prompts_file, "one prompt per line (plain text or a JSON string)")
      ->excludes(prompt_option)
      ->check(CLI::ExistingFile);
  infer_command->add_option("--class", infer.class_label, "video recipes: class to sample (class-conditional models)");
  infer_command->add_option("--sampler", infer.sampler, "video recipes: ddim | ddpm")->check(CLI::IsMember({"ddim", "ddpm"}));
  infer_command->add_option("--steps", infer.steps, "diffusion recipes: sampling steps")->check(count_of("steps"));
  infer_command->add_option("--cfg-scale", infer.cfg_scale, "diffusion recipes: classifier-free guidance scale")->check(CLI::NonNegativeNumber);
  infer_command->add_option("--num-samples", infer.num_samples, "video recipes: videos to sample")->check(count_of("videos"));
  infer_command->add_option("--out", infer.out, "diffusion recipes: output file (videos .mp4/.gif, images .png/.jpg, or .safetensors for the raw tensor)");
  infer_command->add_option("--negative-prompt", infer.negative_prompt, "text-to-video/image: the unconditional prompt of classifier-free guidance");
  infer_command->add_option("--frames", infer.frames, "text-to-video: frames to sample")->check(count_of("frames"));
  infer_command->add_option("--height", infer.height, "text-to-video/image: height in pixels")->check(count_of("pixels"));
  infer_command->add_option("--width", infer.width, "text-to-video/image: width in pixels")->check(count_of("pixels"));
  infer_command->add_option("--seed", infer.seed, "the run's seed (initial noise of video and image samples)");
  infer_command->add_option("--noise", infer.noise, "text-to-video/image: initial latents (.safetensors, one tensor in diffusers' layout: Latte-1 [B, C, F, H/8, W/8], Sana [B, C, H/32, W/32])")
      ->check(CLI::ExistingFile);
  auto* grad_flag = infer_command->add_flag("--grad", grad, "keep autograd on: per-token attribution (default: grad_inference)");
  infer_command->add_flag("--no-grad", no_grad, "plain generation without gradients")->excludes(grad_flag);
  infer_command->add_flag("--raw", infer.raw, "LLMs: send the prompt as given, without the chat template");
  infer_command->add_flag("--json", infer.json, "print one JSON object (LLM: prompt_ids, output_ids, text, attribution; video/image: outputs, timing, peak memory)");
  infer_command->add_option("--max-new-tokens", infer.max_new_tokens, "tokens to generate at most")->check(CLI::NonNegativeNumber);
  infer_command->add_option("--temperature", infer.temperature, "sampling temperature; 0 = greedy")->check(CLI::NonNegativeNumber);
  infer_command->add_option("--top-p", infer.top_p, "nucleus sampling threshold in (0, 1]")->check(CLI::Range(0.0, 1.0));

  InferArguments chat;
  bool chat_grad = false;
  auto* chat_command = app.add_subcommand(
      "chat", "talk with an LLM: multi-turn with its chat template, answers streamed; /reset, /grad, /quit, Ctrl-D");
  chat_command->add_option("target", chat.target, "RUN_DIR | MODEL_DIR | RECIPE.yaml")->required();
  chat_command->add_option("overrides", chat.overrides, "key=value overrides (e.g. data.template=chatml)");
  chat_command->add_flag("--grad", chat_grad, "print each answer's attribution to its prompt tokens (or type /grad)");
  chat_command->add_option("--max-new-tokens", chat.max_new_tokens, "tokens per answer at most")->check(CLI::NonNegativeNumber);
  chat_command->add_option("--temperature", chat.temperature, "sampling temperature; 0 = greedy")->check(CLI::NonNegativeNumber);
  chat_command->add_option("--top-p", chat.top_p, "nucleus sampling threshold in (0, 1]")->check(CLI::Range(0.0, 1.0));

  auto* list_command = app.add_subcommand("ls", "list shipped recipes and presets");

  std::string copy_name;
  std::filesystem::path copy_destination;
  auto* copy_command = app.add_subcommand("cp", "copy a shipped recipe or preset to edit it");
  copy_command->add_option("name", copy_name, "recipe or preset name (see tune ls)")->required();
  copy_command->add_option("destination", copy_destination, "file or directory")->required();

  std::filesystem::path validate_recipe;
  std::vector<std::string> validate_overrides;
  auto* validate_command = app.add_subcommand("validate", "check a recipe and print the fully resolved config");
  validate_command->add_option("recipe", validate_recipe, "recipe YAML")->required();
  validate_command->add_option("overrides", validate_overrides, "key=value overrides");

  ExportArguments export_arguments;
  auto* export_command = app.add_subcommand("export", "write a checkpoint as a Hugging Face model directory (LLMs) or a diffusers "
                                                    "pipeline directory (Latte-1, Sana)");
  export_command->add_option("checkpoint", export_arguments.checkpoint, "run directory or checkpoint directory")->required();
  export_command->add_flag("--merge-lora", export_arguments.merge_lora, "merge LoRA adapters into the base weights");
  export_command->add_option("--base", export_arguments.base,
                             "with --merge-lora: the original-precision model directory to merge into (QLoRA: the "
                             "model the run quantised from; without it, the dequantised NF4 weights)");
  export_command->add_option("--out", export_arguments.out, "output directory (must not exist)")->required();
  export_command->add_option("--max-shard-size", export_arguments.max_shard_size,
                             "split the weights into shards of at most this size, with an index (default 5GB, as "
                             "transformers; KB/MB/GB decimal, KiB/MiB/GiB binary)");

  PlanArguments plan_arguments;
  auto* plan_command = app.add_subcommand(
      "plan", "memory budget planner: the checkpointing policy, micro-batch and accumulation that fit, fastest first");
  plan_command->add_option("recipe", plan_arguments.recipe, "recipe YAML")->required();
  plan_command->add_option("overrides", plan_arguments.overrides, "key=value overrides");
  plan_command->add_option("--memory", plan_arguments.memory,
                           "memory per process: 16GiB, 500MB (KB/MB/GB decimal, KiB/MiB/GiB binary)")->required();
  plan_command->add_option("--nproc", plan_arguments.nproc, "data-parallel processes (distributed.strategy: ddp, shard_grad_op "
                                                      "or full_shard)")
      ->check(count_of("processes"));
  plan_command->add_flag("--json", plan_arguments.json, "print the plan as one JSON object");
  plan_command->add_flag("--infer", plan_arguments.infer,
                         "plan gradient-enabled sampling (tune infer --grad) instead of training: every checkpointing "
                         "policy x frames x size x classifier-free guidance (video recipes)");
  plan_command->add_option("--frames", plan_arguments.frames, "with --infer: frame counts to plan, e.g. 8,16 (default: "
                                                              "the recipe's sampling.frames)")
      ->delimiter(',')
      ->allow_extra_args(false);
  plan_command->add_option("--size", plan_arguments.sizes, "with --infer: sizes to plan, a square's side or "
                                                           "WIDTHxHEIGHT, e.g. 256,512x320 (default: the recipe's)")
      ->delimiter(',')
      ->allow_extra_args(false);

  PrepareArguments prepare;
  auto* prepare_command =
      app.add_subcommand("prepare", "precompute what training needs (diffusion recipes: the VAE latents of every video or "
                                    "image, and the text encoder's caption embeddings)");
  prepare_command->add_option("recipe", prepare.recipe, "recipe YAML")->required();
  prepare_command->add_option("overrides", prepare.overrides, "key=value overrides");
  prepare_command->add_option("--out", prepare.out, "output folder (default: the recipe's data.latents)");
  prepare_command->add_option("--clips-per-video", prepare.clips_per_video,
                              "video recipes: random clips (temporal crop, flip) encoded per video")
      ->check(count_of("clips"));

  TokenizeArguments tokenize;
  auto* tokenize_command = app.add_subcommand(
      "tokenize", "show how a model's tokenizer (and chat template) sees a text or a conversation");
  tokenize_command->add_option("target", tokenize.target, "model directory, tokenizer.json or tokenizer.model")->required();
  tokenize_command->add_option("--text", tokenize.text, "text to encode (with the model's leading special tokens)");
  tokenize_command->add_option("--messages", tokenize.messages, "JSON file: a list of {role, content} to render");
  tokenize_command->add_option("--template", tokenize.chat_template,
                               "chat template for --messages: auto (the model's own) | plain | llama2 | chatml | "
                               "llama3 | none")
      ->capture_default_str();
  tokenize_command->add_flag("--add-generation-prompt", tokenize.add_generation_prompt,
                             "--messages: end with the assistant's header, as for generation");
  tokenize_command->add_flag("--no-special", tokenize.no_special, "--text: no leading special tokens (BOS)");
  tokenize_command->add_flag("--json", tokenize.json, "print {\"text\", \"ids\", \"pieces\", ...} as one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }

  if (verbose) tune::log::set_level(tune::log::Level::debug);
  if (quiet) tune::log::set_level(tune::log::Level::warn);
  try {
    if (*train_command) {
      train.resume = resume_option->count() > 0;
      // `--resume a.b=c` (CLI11 takes the next word as the option's value): an override, not a path, unless a
      // file or directory of that name exists.
      if (!resume_value.empty() && resume_value.find('=') != std::string::npos &&
          !std::filesystem::exists(resume_value)) {
        train.overrides.push_back(resume_value);
      } else if (!resume_value.empty()) {
        train.resume_from = resume_value;
      }
      train.worker_command = command_line_without_nproc(argc, argv);
      return run_train(train);
    }
    if (*infer_command) {
      if (grad) infer.grad = true;
      if (no_grad) infer.grad = false;
      return run_infer(infer);
    }
    if (*chat_command) {
      if (chat_grad) chat.grad = true;
      return run_chat(chat);
    }
    if (*list_command) return run_list();
    if (*copy_command) return run_copy(copy_name, copy_destination);
    if (*validate_command) return run_validate(validate_recipe, validate_overrides);
    if (*export_command) return run_export(export_arguments);
    if (*plan_command) return run_plan(plan_arguments);
    if (*prepare_command) return run_prepare(prepare);
    if (*tokenize_command) return run_tokenize(tokenize);
  } catch (const tune::Error& error) {
    return report("error", error.what(), error.exit_code());
  } catch (const c10::Error& error) {
    // A LibTorch failure that no check of ours caught: report it without the C++ stack trace.
    return report("internal error", error.what_without_backtrace(), 1);
  } catch (const std::filesystem::filesystem_error& error) {
    return report("error", error.what(), 1);
  } catch (const std::exception& error) {
    return report("internal error", error.what(), 1);
  }
  return 2;
}
