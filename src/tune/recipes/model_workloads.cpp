// Step shapes of the Llama and Latte families (see model_workloads.h).
#include "tune/recipes/model_workloads.h"

#include <algorithm>

#include "tune/nn/frame_attention.h"

namespace tune::recipes {

CpuWorkload llama_workload(const models::LlamaConfig& config, int64_t batch, int64_t sequence, c10::ScalarType dtype,
                           bool training) {
  const int64_t tokens = batch * sequence, hidden = config.hidden_size;
  const int64_t head_dim = config.resolved_head_dim();
  const int64_t q = config.num_attention_heads * head_dim, kv = config.num_key_value_heads * head_dim;
  CpuWorkload workload;
  workload.dtype = dtype;
  workload.training = training;
  workload.projections = {{tokens, hidden, q},
                          {tokens, hidden, kv},
                          {tokens, q, hidden},
                          {tokens, hidden, config.intermediate_size},
                          {tokens, config.intermediate_size, hidden},
                          {tokens, hidden, config.vocab_size}};
  // One row's heads: the choice must not depend on the micro-batch split (cpu_kernel_choice.h).
  workload.attentions = {{config.num_attention_heads, sequence, sequence, head_dim, /*causal=*/true}};
  return workload;
}

void add_nf4_projections(CpuWorkload& workload, const models::LlamaConfig& config, int64_t tokens,
                         const std::vector<std::string>& nf4_modules) {
  const int64_t hidden = config.hidden_size, head_dim = config.resolved_head_dim();
  const int64_t q = config.num_attention_heads * head_dim, kv = config.num_key_value_heads * head_dim;
  const std::vector<std::pair<std::string, ProjectionShape>> projections = {
      {"q_proj", {tokens, hidden, q}},  {"k_proj", {tokens, hidden, kv}},
      {"v_proj", {tokens, hidden, kv}}, {"o_proj", {tokens, q, hidden}},
      {"gate_proj", {tokens, hidden, config.intermediate_size}},
      {"up_proj", {tokens, hidden, config.intermediate_size}},
      {"down_proj", {tokens, config.intermediate_size, hidden}}};
  for (const auto& projection : projections) {
    const ProjectionShape& shape = projection.second;  // a plain reference: clang 14 cannot capture a binding
    if (std::find(nf4_modules.begin(), nf4_modules.end(), projection.first) == nf4_modules.end()) continue;
    const bool seen = std::any_of(workload.nf4_projections.begin(), workload.nf4_projections.end(),
                                  [&](const ProjectionShape& s) {
                                    return s.rows == shape.rows && s.inner == shape.inner && s.columns == shape.columns;
                                  });
    if (!seen) workload.nf4_projections.push_back(shape);
  }
}

CpuWorkload latte_workload(const models::LatteConfig& config, int64_t batch, c10::ScalarType dtype, bool training) {
  const int64_t frames = config.num_frames, patches = config.num_patches(), hidden = config.hidden_size;
  const int64_t tokens = batch * frames * patches, head_dim = hidden / config.num_heads;
  CpuWorkload workload;
  workload.dtype = dtype;
  workload.training = training;
  workload.projections = {{tokens, hidden, 3 * hidden},
                          {tokens, hidden, hidden},
                          {tokens, hidden, config.mlp_hidden_size()},
                          {tokens, config.mlp_hidden_size(), hidden}};
  // One clip's heads: the choice must not depend on the micro-batch split (cpu_kernel_choice.h). The temporal
  // blocks' attention over frames runs nn::frame_attention on the CPU, not the core being chosen.
  workload.attentions = {{frames * config.num_heads, patches, patches, head_dim, false}};
  if (frames > nn::kFrameAttentionMaxFrames || !nn::frame_attention_enabled()) {
    workload.attentions.push_back({patches * config.num_heads, frames, frames, head_dim, false});
  }
  return workload;
}

CpuWorkload latte_t2v_workload(const models::LatteT2VConfig& config, int64_t batch, int64_t frames, int64_t latent_h,
                               int64_t latent_w, int64_t text_tokens, c10::ScalarType dtype, bool training) {
  const int64_t patches = (latent_h / config.patch_size) * (latent_w / config.patch_size);
  const int64_t hidden = config.inner_dim(), heads = config.num_attention_heads;
  const int64_t tokens = batch * frames * patches;
  CpuWorkload workload;
  workload.dtype = dtype;
  workload.training = training;
  workload.projections = {{tokens, hidden, hidden}, {tokens, hidden, 4 * hidden}, {tokens, 4 * hidden, hidden}};
  // One clip's heads, as latte_workload.
  workload.attentions = {{frames * heads, patches, patches, config.attention_head_dim, false},
                         {patches * heads, frames, frames, config.attention_head_dim, false},
                         {frames * heads, patches, std::max<int64_t>(text_tokens, 1), config.attention_head_dim, false}};
  return workload;
}

CpuWorkload sana_workload(const models::SanaConfig& config, int64_t batch, int64_t latent_h, int64_t latent_w,
                          int64_t text_tokens, c10::ScalarType dtype, bool training) {
  const int64_t patches = (latent_h / config.patch_size) * (latent_w / config.patch_size);
  const int64_t hidden = config.inner_dim(), cross = config.cross_inner_dim();
  CpuWorkload workload;
  workload.dtype = dtype;
  workload.training = training;
  workload.projections = {{batch * patches, hidden, hidden}, {batch * patches, hidden, cross}};
  // One image's heads: its tokens against the caption.
  workload.attentions = {{config.num_cross_attention_heads, patches, std::max<int64_t>(text_tokens, 1),
                          config.cross_attention_head_dim, false}};
  return workload;
}

}  // namespace tune::recipes
