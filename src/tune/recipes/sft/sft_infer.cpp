// `tune infer` for the SFT recipe: generation with a KV cache, then (with --grad, the default from grad_inference)
// per-prompt-token attribution computed with autograd through the checkpointed, autocast model.
#include <iostream>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/progress.h"
#include "tune/recipes/sft/attribution_table.h"
#include "tune/recipes/sft/inference_session.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes::sft {

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
  InferenceSession session = open_inference_session(request);
  const RunSettings& run = session.run;
  auto& model = session.model;
  const auto& tokenizer = *session.tokenizer;
  const auto& device = session.device;
  const auto& sampling = session.sampling;
  const auto& runner = session.runner;

  for (const auto& prompt : request.prompts) {
    const std::vector<int64_t> prompt_ids = single_turn_prompt(session, prompt);
    memory_tracker::reset_peak(device.is_cuda());
    const auto output_ids = generate(model, prompt_ids, sampling, run.mixed_precision, device);
    const int64_t generation_peak = memory_tracker::peak_bytes(device.is_cuda());
    const std::string text = tokenizer.decode(output_ids);
    nlohmann::json json = {{"prompt", prompt},   {"prompt_ids", prompt_ids},
                           {"output_ids", output_ids}, {"text", text},
                           {"generation_peak_mem_bytes", generation_peak},
                           {"parameters_bytes", session.parameter_bytes}};

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
