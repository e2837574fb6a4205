#include "tune/recipes/diffusion/guidance_settings.h"

#include <fmt/format.h>

#include "tune/recipes/common_schema.h"

namespace tune::recipes::diffusion_common {

void add_guidance_keys(config::Schema& schema) {
  schema.path("guidance.reference", "tune infer --grad: image or video to match at guidance.reference_frame");
  schema.integer("guidance.reference_frame", 0, "frame index matched to the reference");
  schema.real("guidance.reference_weight", 1.0, "weight of the reference-frame objective");
  schema.real("guidance.smoothness_weight", 0.1,
              "weight of the smoothness objective (videos: between frames; images: between neighbouring latents)");
}

GuidanceSettings read_guidance_settings(const config::Config& config, int64_t num_frames, const std::string& frames_key) {
  GuidanceSettings guidance;
  if (config.has("guidance.reference")) guidance.reference = config.get_string("guidance.reference");
  guidance.reference_frame = get_int_at_least(config, "guidance.reference_frame", 0);
  if (guidance.reference_frame >= num_frames) {
    config.fail("guidance.reference_frame", fmt::format("must be < {} ({})", frames_key, num_frames));
  }
  guidance.reference_weight = config.get_real("guidance.reference_weight");
  guidance.smoothness_weight = config.get_real("guidance.smoothness_weight");
  return guidance;
}

}  // namespace tune::recipes::diffusion_common
