// The guidance.* keys of the video recipes (`tune infer --grad`): which reference frame the sample should match and
// how strongly, and the weight of temporal smoothness. Read once into a plain struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tune/config/config.h"

namespace tune::recipes::diffusion_common {

struct GuidanceSettings {
  std::optional<std::string> reference;   // image or video whose frame the sample should match (--grad)
  int64_t reference_frame = 0;            // which frame of `reference` to use, and which sampled frame to match
  double reference_weight = 1.0;
  double smoothness_weight = 0.1;         // temporal smoothness of the predicted clean video
};

void add_guidance_keys(config::Schema& schema);
// `num_frames` (at `frames_key`) bounds guidance.reference_frame; ConfigError naming the key otherwise.
GuidanceSettings read_guidance_settings(const config::Config& config, int64_t num_frames, const std::string& frames_key);

}  // namespace tune::recipes::diffusion_common
