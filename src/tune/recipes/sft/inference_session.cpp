// Setting up LLM inference (see inference_session.h).
#include "tune/recipes/sft/inference_session.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/core/threads.h"
#include "tune/data/model_chat_template.h"
#include "tune/io/run_checkpoints.h"
#include "tune/models/generation_config.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/model_workloads.h"
#include "tune/recipes/sft/peft_config.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_model.h"

namespace tune::recipes::sft {
namespace {

struct LoadedForInference {
  models::LlamaForCausalLM model{nullptr};
  std::optional<data::Tokenizer> tokenizer;
  std::string weights_from;
  std::filesystem::path model_dir;  // the directory config.json came from (empty: random initialisation)
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

// A LoRA run's adapter is loaded as its adapter_config.json describes it. The run's config.yaml agrees with that
// file (it was trained from it); a command-line override that disagrees would otherwise be silently ignored, or, if
// it were applied, rescale or reshape the trained adapter.
models::LlamaLoraOptions adapter_as_trained(const models::LlamaLoraOptions& requested,
                                            const std::filesystem::path& checkpoint) {
  const auto adapter_config = checkpoint / "adapter_config.json";
  require_checkpoint_files(checkpoint, {"adapter_config.json"});
  const auto trained = lora_from_peft_config(adapter_config);
  auto check = [&](const char* key, const auto& wanted, const auto& found, const std::string& shown_wanted,
                   const std::string& shown_found) {
    if (wanted == found) return;
    throw UsageError(fmt::format(
        "lora.{}: the configuration says {}, but the adapter in {} was trained with {} (its adapter_config.json); "
        "tune infer loads the adapter as trained.\n---> HINT: remove the override",
        key, shown_wanted, checkpoint.string(), shown_found));
  };
  check("rank", requested.lora.rank, trained.lora.rank, std::to_string(requested.lora.rank),
        std::to_string(trained.lora.rank));
  check("alpha", requested.lora.alpha, trained.lora.alpha, fmt::format("{}", requested.lora.alpha),
        fmt::format("{}", trained.lora.alpha));
  auto sorted = [](std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    return names;
  };
  check("target_modules", sorted(requested.target_modules), sorted(trained.target_modules),
        fmt::format("[{}]", fmt::join(requested.target_modules, ", ")),
        fmt::format("[{}]", fmt::join(trained.target_modules, ", ")));
  // lora.dropout does not act at inference; the adapter's own value is kept so a re-export writes it back.
  // How the base is stored is not the adapter's business (PEFT's config does not say): the run's config decides,
  // so a QLoRA run answers with the NF4 base it trained on.
  models::LlamaLoraOptions loaded = trained;
  loaded.nf4_modules = requested.nf4_modules;
  loaded.double_quant = requested.double_quant;
  return loaded;
}

// Picks the weights: a bare model directory, the newest checkpoint of a run, or the recipe's base model.
LoadedForInference load_for_inference(const InferRequest& request, SftSettings sft, const RunSettings& run) {
  LoadedForInference loaded;
  std::optional<std::filesystem::path> checkpoint;
  checkpoint = inference_checkpoint(request);
  if (checkpoint && !is_lora_checkpoint(*checkpoint)) {
    if (!sft.model.path) check_architecture_matches(sft.model.architecture, *checkpoint);
    // A full fine-tuning checkpoint is itself a Hugging Face model directory.
    sft.model.path = checkpoint->string();
    sft.model.lora = {};
    sft.tokenizer_path = checkpoint->string();  // the tokenizer files travel with every checkpoint
  } else if (checkpoint) {
    sft.model.lora = adapter_as_trained(sft.model.lora, *checkpoint);
    sft.tokenizer_path = checkpoint->string();
  }
  if (sft.model.path) loaded.model_dir = *sft.model.path;
  loaded.tokenizer = load_tokenizer(sft);
  loaded.model = build_model(sft, *loaded.tokenizer, run.seed, run.frozen_weights_bf16, ModelUse::inference);
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

}  // namespace

InferenceSession open_inference_session(const InferRequest& request) {
  if (!request.config) throw Error("tune infer for an LLM needs a configuration (a recipe, a run, or model.path)");
  InferenceSession session;
  session.run = read_run_settings(*request.config);
  session.sft = read_sft_settings(*request.config);
  const RunSettings& run = session.run;
  SftSettings& sft = session.sft;
  GenerationSettings generation = sft.generation;
  if (request.max_new_tokens >= 0) generation.max_new_tokens = request.max_new_tokens;
  if (request.temperature >= 0) generation.temperature = request.temperature;
  if (request.top_p >= 0) generation.top_p = request.top_p;
  if (generation.top_p <= 0 || generation.top_p > 1) throw UsageError("--top-p must be in (0, 1]");

  configure_threads(run.threads);
  memory_tracker::install();
  session.device = torch::Device(run.device);
  auto loaded = load_for_inference(request, sft, run);
  session.model = loaded.model;
  session.tokenizer = loaded.tokenizer;
  session.weights_from = loaded.weights_from;
  auto& model = session.model;
  const auto& tokenizer = *session.tokenizer;
  // param_dtype bf16: every weight in bf16 (built so from a model directory; converted here after a random init).
  if (run.frozen_weights_bf16) store_frozen_weights_in_bf16(model);
  model->to(session.device);
  // One prompt of the recipe's length: inference (with --grad, backward's input gradients follow the same kernels).
  CpuWorkload workload = llama_workload(model->config(), 1, sft.data.max_length,
                                        precision::compute_dtype(run.mixed_precision), /*training=*/false);
  add_nf4_projections(workload, model->config(), sft.data.max_length, model->lora_options().nf4_modules);
  choose_cpu_kernels(workload, session.device);
  for (const auto& param : model->parameters()) session.parameter_bytes += static_cast<int64_t>(param.nbytes());
  const Nf4Footprint nf4 = nf4_footprint(model);
  session.parameter_bytes += nf4.bytes;
  log::info("weights: {} ({}{}{})", loaded.weights_from, format_bytes(static_cast<double>(session.parameter_bytes)),
            run.frozen_weights_bf16 ? " in bf16, param_dtype bf16" : "",
            nf4.tensors > 0 ? fmt::format(", {} projection weights in NF4", nf4.tensors) : "");

  auto& chat_template = session.chat_template;
  if (!request.raw) {
    // A bare model directory uses a template only when it has its own or the user names one (data.template=...):
    // a base model gets the prompt as given, as transformers would give it.
    const bool template_named = !request.config->where("data.template").file.empty();
    if (!request.model_dir || template_named) {
      chat_template = data::ChatTemplate::resolve(sft.data.chat_template, tokenizer);
    } else if (data::model_chat_template(tokenizer)) {
      chat_template = data::ChatTemplate::resolve("auto", tokenizer);
    }
  }
  auto& sampling = session.sampling;
  sampling.max_new_tokens = generation.max_new_tokens;
  sampling.temperature = generation.temperature;
  sampling.top_p = generation.top_p;
  sampling.seed = run.seed;
  // Stop tokens as transformers' generate() takes them: config.json's, then generation_config.json's (where chat
  // models list their end-of-turn token), then the tokenizer's EOS.
  sampling.stop_ids = models::merge_ids(model->config().eos_token_ids,
                                        models::generation_config_eos_ids(loaded.model_dir));
  sampling.stop_ids = models::merge_ids(sampling.stop_ids, {tokenizer.eos_id()});
  if (chat_template && !chat_template->end_of_turn_text().empty()) {
    const int64_t end_of_turn = tokenizer.piece_to_id(chat_template->end_of_turn_text());
    if (end_of_turn >= 0) sampling.stop_ids = models::merge_ids(sampling.stop_ids, {end_of_turn});
  }
  session.runner = std::make_shared<memory::CheckpointRunner>(run.checkpointing, model->num_blocks());
  model->set_block_runner(session.runner);
  return session;

}

std::vector<int64_t> single_turn_prompt(const InferenceSession& session, const std::string& message) {
  if (!session.chat_template) return session.tokenizer->encode(message, /*add_bos=*/true);
  data::Conversation conversation;
  conversation.messages.push_back({"user", message});
  return session.chat_template->encode_prompt(*session.tokenizer, conversation);
}

}  // namespace tune::recipes::sft
