// `tune plan --infer`: the memory of gradient-enabled sampling (`tune infer --grad`) for a video or image diffusion
// recipe, for every checkpointing policy x frames x resolution x classifier-free guidance (which doubles the batch
// the denoiser sees). A sample runs in phases that never overlap: the text encoder encodes the prompts and is freed,
// then the denoiser's guided steps (its weights, and the activations of one forward + backward through it), then
// the VAE decodes; the plan predicts the first two (the decode is not planned) and a row fits when both fit.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tune/config/config.h"

namespace tune::recipes {

struct InferencePlanRequest {
  config::Config config;
  uint64_t budget_bytes = 0;
  // The samples to plan, each with and without guidance: every frame count x size (the recipe's sampling.frames and
  // sampling.height x sampling.width where empty).
  std::vector<int64_t> frames;
  std::vector<std::pair<int64_t, int64_t>> sizes;  // (height, width) in pixels
};

struct InferencePlanRow {
  std::string checkpointing = "full";  // off | selective | every_k | sqrt | full
  int64_t k = 0;
  int64_t frames = 1;
  int64_t height = 0, width = 0;
  bool cfg = false;                    // classifier-free guidance: the denoiser runs on 2 x prompts rows
  int64_t weights_bytes = 0;           // the denoiser's weights as sampling holds them
  int64_t activations_bytes = 0;       // one guided step's forward + backward
  int64_t denoise_peak_bytes = 0;      // weights + activations (what infer --json reports as peak_mem_bytes)
  int64_t peak_bytes = 0;              // the larger of the text phase and the denoising phase
  double relative_time = 1.0;          // of a guided step against policy off (the training plan's FLOP model)
  bool fits = false;
  bool best = false;                   // the fastest policy that fits for this sample
  bool requested = false;              // guidance as the recipe samples (sampling.cfg_scale > 1)

  std::string checkpointing_label() const;
  // The overrides that select the row's policy and sample for `tune infer` (recipe keys); `with_shape`: the sample's
  // frames and size are sampling settings (not for a model that samples at the shape it was built for).
  std::vector<std::string> overrides(bool with_shape = true) const;
};

struct InferencePlan {
  std::string recipe;
  std::string model;      // one line: the denoiser and the text encoder
  std::string precision;  // "bf16 autocast" / "fp32"
  std::string device;
  uint64_t budget_bytes = 0;
  int64_t prompts = 1;                 // the batch the denoiser sees without guidance
  std::string batch_unit = "prompt";   // what `prompts` counts: prompts, or samples of a class-conditional model
  bool shape_settable = true;          // frames and size are sampling settings (InferencePlanRow::overrides)
  int64_t text_phase_bytes = 0;  // the text encoder's weights while it encodes (it is freed before denoising); 0: none
  std::string time_model;
  std::vector<InferencePlanRow> rows;  // grouped by sample (frames, size, guidance), fastest policy first

  // Every requested sample fits at some policy.
  bool requested_fit() const;
};

// Orders each sample's policies fastest first, and marks what fits and each sample's best.
void rank_and_choose(InferencePlan& plan);

std::string inference_plan_table(const InferencePlan& plan);
nlohmann::json inference_plan_to_json(const InferencePlan& plan);
// The requested samples that fit at no policy: by how much, and what fits instead.
std::string inference_nothing_fits_message(const InferencePlan& plan);

}  // namespace tune::recipes
