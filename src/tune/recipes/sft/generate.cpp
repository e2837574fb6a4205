// Generation loop and gradient attribution for the SFT recipe.
#include "tune/recipes/sft/generate.h"

#include <algorithm>

namespace tune::recipes::sft {
namespace {

torch::Tensor ids_tensor(const std::vector<int64_t>& ids, const torch::Device& device) {
  return torch::tensor(ids, torch::kLong).unsqueeze(0).to(device);
}

int64_t sample_next(const torch::Tensor& logits, const SamplingOptions& options, torch::Generator& generator) {
  if (options.temperature <= 0.0) return logits.argmax(-1).item<int64_t>();
  auto probs = torch::softmax(logits.to(torch::kFloat) / options.temperature, -1);
  if (options.top_p < 1.0) {
    // Nucleus sampling: keep the smallest set of tokens whose probability mass reaches top_p.
    auto sorted = probs.sort(-1, /*descending=*/true);
    auto sorted_probs = std::get<0>(sorted);
    auto sorted_index = std::get<1>(sorted);
    auto mass_before = sorted_probs.cumsum(-1) - sorted_probs;
    sorted_probs = sorted_probs.masked_fill(mass_before >= options.top_p, 0.0);
    probs = torch::zeros_like(probs).scatter(-1, sorted_index, sorted_probs);
  }
  return torch::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
}

}  // namespace

std::vector<int64_t> generate(models::LlamaForCausalLM& model, const std::vector<int64_t>& prompt_ids,
                              const SamplingOptions& options, precision::MixedPrecision precision,
                              const torch::Device& device) {
  torch::NoGradGuard no_grad;
  precision::AutocastScope autocast(precision, device);
  model->eval();
  auto generator = at::detail::createCPUGenerator(options.seed);
  models::KVCache cache;
  std::vector<int64_t> output;
  const int64_t context = model->config().max_position_embeddings;
  torch::Tensor logits = model->forward(ids_tensor(prompt_ids, device), {torch::Tensor(), torch::Tensor(), &cache});
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int64_t next = sample_next(logits[0][-1].to(torch::kCPU), options, generator);
    output.push_back(next);
    if (options.on_token) options.on_token(next);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) break;
    if (static_cast<int64_t>(prompt_ids.size() + output.size()) >= context) break;
    logits = model->forward(ids_tensor({next}, device), {torch::Tensor(), torch::Tensor(), &cache});
  }
  return output;
}

AttributionResult attribute(models::LlamaForCausalLM& model, const std::vector<int64_t>& prompt_ids,
                            const std::vector<int64_t>& continuation_ids, precision::MixedPrecision precision,
                            const torch::Device& device) {
  torch::AutoGradMode grad_on(true);
  model->eval();  // no dropout: attribution of the deterministic model
  std::vector<int64_t> all_ids = prompt_ids;
  all_ids.insert(all_ids.end(), continuation_ids.begin(), continuation_ids.end());
  const auto ids = ids_tensor(all_ids, device);
  auto embeddings = model->embed(ids).detach().requires_grad_(true);
  torch::Tensor log_prob;
  {
    precision::AutocastScope autocast(precision, device);
    const auto logits = model->forward_embeddings(embeddings);
    const auto log_probs = torch::log_softmax(logits.to(torch::kFloat), -1);
    const int64_t prompt_length = static_cast<int64_t>(prompt_ids.size());
    const int64_t total = static_cast<int64_t>(all_ids.size());
    // Position t predicts token t + 1: the continuation's tokens are predicted from positions P-1 .. T-2.
    const auto predicted = log_probs[0].slice(0, prompt_length - 1, total - 1);
    const auto targets = ids[0].slice(0, prompt_length, total).unsqueeze(1);
    log_prob = predicted.gather(1, targets).sum();
  }
  const auto gradient = torch::autograd::grad({log_prob}, {embeddings})[0][0].to(torch::kDouble).cpu();
  const auto embedding = embeddings[0].detach().to(torch::kDouble).cpu();
  AttributionResult result;
  result.continuation_log_prob = log_prob.item<double>();
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    const auto g = gradient[static_cast<int64_t>(i)];
    result.prompt_tokens.push_back({prompt_ids[i], g.norm().item<double>(),
                                    (g * embedding[static_cast<int64_t>(i)]).sum().item<double>()});
  }
  return result;
}

}  // namespace tune::recipes::sft
