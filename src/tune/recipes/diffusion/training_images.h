// Reading a captioned training image for `tune prepare` (Sana's images, text-to-video Latte's joined images), with
// the recipes' one rule for images that do not decode.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace tune::recipes::diffusion_common {

// The image as training sees it ([3, S, S] in [-1, 1]: data::load_training_image); an unreadable one throws
// InputError naming it and the setting that would skip it (`skip_setting`, e.g. "data.on_bad_image: skip"), or
// with `skip` is logged and left out (nullopt).
std::optional<torch::Tensor> read_training_image_or_skip(const std::filesystem::path& image, int64_t size, bool skip,
                                                         const std::string& skip_setting);

// The decoded image (uint8 [H, W, 3]) under the same rule, for callers that choose its training size from it (Sana's
// aspect-ratio buckets).
std::optional<torch::Tensor> read_decoded_image_or_skip(const std::filesystem::path& image, bool skip,
                                                        const std::string& skip_setting);

}  // namespace tune::recipes::diffusion_common
