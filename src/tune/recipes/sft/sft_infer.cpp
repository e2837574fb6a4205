// `tune infer` for the SFT recipe: generation with a KV cache, then (with --grad, the default from grad_inference)
// per-prompt-token attribution computed with autograd through the checkpointed, autocast model.
#include <iostream>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/io/run_checkpoints.h"
#include "tune/memory/checkpoint.h"
#include "tune/precision/cpu_gemm.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/sft/generate.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes::sft {
namespace {

struct LoadedForInference {
  models::LlamaForCausalLM model{nullptr};
  std::optional<data::Tokenizer> tokenizer;
  std::string weights_from;
};

// A recipe that states its architecture (random init) and a full checkpoint of its run must agree: the
// checkpoint's config.json decides what is loaded, so a recipe key (or command-line override) that disagrees would
// otherwise be silently ignored.
void check_architecture_matches(const models::LlamaConfig& recipe, const std::filesystem::path& checkpoint) {
  const auto trained = models::LlamaConfig::from_file((checkpoint / "config.json").string());
  auto check = [&](const char* key, auto wanted, auto found) {
    if (wanted == found) return;
    throw UsageError(fmt::format(
        "model.{}: the recipe says {}, but the checkpoint {} was trained with {}; tune infer loads the checkpoint "
        "as trained.\n---> HINT: remove the key or override, or set output_dir to a run trained with it",
        key, wanted, checkpoint.string(), found));
  };
  if (recipe.vocab_size != 0) check("vocab_size", recipe.vocab_size, trained.vocab_size);
  check("hidden_size", recipe.hidden_size, trained.hidden_size);
  check("intermediate_size", recipe.intermediate_size, trained.intermediate_size);
  check("num_hidden_layers", recipe.num_hidden_layers, trained.num_hidden_layers);
  check("num_attention_heads", recipe.num_attention_heads, trained.num_attention_heads);
  check("num_key_value_heads", recipe.num_key_value_heads, trained.num_key_value_heads);
  check("max_position_embeddings", recipe.max_position_embeddings, trained.max_position_embeddings);
  check("rope_theta", recipe.rope_theta, trained.rope_theta);
  check("rms_norm_eps", recipe.rms_norm_eps, trained.rms_norm_eps);
  check("tie_word_embeddings", recipe.tie_word_embeddings, trained.tie_word_embeddings);
}

// Picks the weights: a bare model directory, the newest checkpoint of a run, or the recipe's base model.
LoadedForInference load_for_inference(const InferRequest& request, SftSettings sft, uint64_t seed) {
  LoadedForInference loaded;
  std::optional<std::filesystem::path> checkpoint;
  if (request.run_dir) checkpoint = io::newest_complete_checkpoint(*request.run_dir);
  if (checkpoint && !is_lora_checkpoint(*checkpoint)) {
    if (!sft.model.path) check_architecture_matches(sft.model.architecture, *checkpoint);
    // A full fine-tuning checkpoint is itself a Hugging Face model directory.
    sft.model.path = checkpoint->string();
    sft.model.lora = {};
    sft.tokenizer_path = checkpoint->string();  // the tokenizer files travel with every checkpoint
  } else if (checkpoint) {
    sft.tokenizer_path = checkpoint->string();
  }
  loaded.tokenizer = load_tokenizer(sft);
  loaded.model = build_model(sft, *loaded.tokenizer, seed);
  if (checkpoint && is_lora_checkpoint(*checkpoint)) load_checkpoint_weights(*checkpoint, loaded.model);
  if (checkpoint) {
    loaded.weights_from = checkpoint->string();
  } else if (sft.model.path) {
    loaded.weights_from = *sft.model.path;
  } else {
    loaded.weights_from = "random initialisation (no checkpoint found)";
    log::warn("no trained checkpoint found{}: generating from a randomly initialised model",
              request.run_dir ? " in " + request.run_dir->string() : "");
  }
  return loaded;
}

// A token as one printable cell: control characters escaped so the table keeps its rows.
std::string printable_piece(const std::string& piece) {
  std::string shown;
  for (const char c : piece) {
    if (c == '\n') shown += "\\n";
    else if (c == '\t') shown += "\\t";
    else shown += c;
  }
  return shown;
}

void print_attribution(const data::Tokenizer& tokenizer, const AttributionResult& result) {
  double max_norm = 0.0;
  for (const auto& token : result.prompt_tokens) max_norm = std::max(max_norm, token.grad_norm);
  std::cout << fmt::format("\nattribution of the output (log p = {:.4f}) to each prompt token:\n",
                           result.continuation_log_prob);
  std::cout << fmt::format("  {:>4}  {:<16} {:>11} {:>11}  {}\n", "pos", "token", "|grad|", "grad.emb", "");
  for (size_t i = 0; i < result.prompt_tokens.size(); ++i) {
    const auto& token = result.prompt_tokens[i];
    const int bar = max_norm > 0 ? static_cast<int>(std::lround(20.0 * token.grad_norm / max_norm)) : 0;
    std::cout << fmt::format("  {:>4}  {:<16} {:>11.4e} {:>11.4e}  {}\n", i, printable_piece(tokenizer.piece(token.token_id)),
                             token.grad_norm, token.grad_x_input, std::string(static_cast<size_t>(bar), '#'));
  }
}

}  // namespace

int infer(const InferRequest& request) {
  if (request.prompts.empty()) throw UsageError("tune infer for an LLM needs --prompt TEXT or --prompts-file FILE");
  for (const auto& [given, flag] : {std::pair{request.class_label.has_value(), "--class"},
                                    std::pair{request.sampler.has_value(), "--sampler"},
                                    std::pair{request.steps.has_value(), "--steps"},
                                    std::pair{request.cfg_scale.has_value(), "--cfg-scale"},
                                    std::pair{request.num_samples.has_value(), "--num-samples"},
                                    std::pair{request.out.has_value(), "--out"}}) {
    if (given) throw UsageError(fmt::format("{} applies to video recipes (latte); this is an LLM (sft) model", flag));
  }
  RunSettings run;
  SftSettings sft;
  if (request.config) {
    run = read_run_settings(*request.config);
    sft = read_sft_settings(*request.config);
  } else {
    run.device = torch::cuda::is_available() ? "cuda" : "cpu";
    sft.model.path = request.model_dir->string();
  }
  GenerationSettings generation = sft.generation;
  if (request.max_new_tokens >= 0) generation.max_new_tokens = request.max_new_tokens;
  if (request.temperature >= 0) generation.temperature = request.temperature;
  if (request.top_p >= 0) generation.top_p = request.top_p;
  if (generation.top_p <= 0 || generation.top_p > 1) throw UsageError("--top-p must be in (0, 1]");

  configure_threads(run.threads);
  memory_tracker::install();
  precision::install_cpu_gemm();
  const torch::Device device(run.device);
  auto loaded = load_for_inference(request, sft, run.seed);
  auto& model = loaded.model;
  const auto& tokenizer = *loaded.tokenizer;
  if (run.frozen_weights_bf16 && model->has_lora()) store_frozen_weights_in_bf16(model);
  model->to(device);
  log::info("weights: {}", loaded.weights_from);

  SamplingOptions sampling;
  sampling.max_new_tokens = generation.max_new_tokens;
  sampling.temperature = generation.temperature;
  sampling.top_p = generation.top_p;
  sampling.seed = run.seed;
  sampling.stop_ids = model->config().eos_token_ids;
  sampling.stop_ids.push_back(tokenizer.eos_id());
  std::optional<data::ChatTemplate> chat_template;
  if (request.config) chat_template = data::ChatTemplate::resolve(sft.data.chat_template, tokenizer);
  auto runner = std::make_shared<memory::CheckpointRunner>(run.checkpointing, model->num_blocks());
  model->set_block_runner(runner);

  for (const auto& prompt : request.prompts) {
    // The chat template the model was fine-tuned with; a bare model directory gets the raw prompt after BOS.
    std::vector<int64_t> prompt_ids;
    if (chat_template) {
      data::Conversation conversation;
      conversation.messages.push_back({"user", prompt});
      prompt_ids = chat_template->encode_prompt(tokenizer, conversation);
    } else {
      prompt_ids = tokenizer.encode(prompt, /*add_bos=*/true);
    }
    memory_tracker::reset_peak(device.is_cuda());
    const auto output_ids = generate(model, prompt_ids, sampling, run.mixed_precision, device);
    const int64_t generation_peak = memory_tracker::peak_bytes(device.is_cuda());
    const std::string text = tokenizer.decode(output_ids);
    nlohmann::json json = {{"prompt", prompt},   {"prompt_ids", prompt_ids},
                           {"output_ids", output_ids}, {"text", text},
                           {"generation_peak_mem_bytes", generation_peak}};

    std::optional<AttributionResult> attribution;
    int64_t attribution_peak = 0;
    if (request.grad && !output_ids.empty()) {
      memory_tracker::reset_peak(device.is_cuda());
      attribution = attribute(model, prompt_ids, output_ids, run.mixed_precision, device);
      attribution_peak = memory_tracker::peak_bytes(device.is_cuda());
      nlohmann::json tokens = nlohmann::json::array();
      for (const auto& token : attribution->prompt_tokens) {
        tokens.push_back({{"id", token.token_id}, {"piece", tokenizer.piece(token.token_id)},
                          {"grad_norm", token.grad_norm}, {"grad_x_input", token.grad_x_input}});
      }
      json["attribution"] = {{"log_prob", attribution->continuation_log_prob}, {"tokens", tokens},
                             {"gradient_checkpointing", runner->describe()},
                             {"mixed_precision", precision::to_string(run.mixed_precision)},
                             {"peak_mem_bytes", attribution_peak}};
    }

    if (request.json) {
      std::cout << json.dump() << std::endl;
      continue;
    }
    std::cout << text << std::endl;
    log::info("generation: {} tokens, peak memory {}", output_ids.size(),
              format_bytes(static_cast<double>(generation_peak)));
    if (attribution) {
      print_attribution(tokenizer, *attribution);
      log::info("gradient-enabled pass: gradient checkpointing {}, mixed precision {}, peak memory {}",
                runner->describe(), precision::to_string(run.mixed_precision),
                format_bytes(static_cast<double>(attribution_peak)));
    }
  }
  return 0;
}

}  // namespace tune::recipes::sft
