#include "tune/recipes/diffusion/training_images.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/image_transform.h"

namespace tune::recipes::diffusion_common {

std::optional<torch::Tensor> read_training_image_or_skip(const std::filesystem::path& image, int64_t size, bool skip,
                                                         const std::string& skip_setting) {
  try {
    return data::load_training_image(image, size);
  } catch (const InputError& error) {
    if (!skip) throw InputError(fmt::format("{} (set {} to leave such images out)", error.what(), skip_setting));
    log::warn("skipping an unreadable image: {}", error.what());
    return std::nullopt;
  }
}

}  // namespace tune::recipes::diffusion_common
