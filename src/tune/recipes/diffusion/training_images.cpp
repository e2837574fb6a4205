#include "tune/recipes/diffusion/training_images.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/image_transform.h"

namespace tune::recipes::diffusion_common {

namespace {

template <typename Read>
std::optional<torch::Tensor> read_or_skip(const Read& read, bool skip, const std::string& skip_setting) {
  try {
    return read();
  } catch (const InputError& error) {
    if (!skip) throw InputError(fmt::format("{} (set {} to leave such images out)", error.what(), skip_setting));
    log::warn("skipping an unreadable image: {}", error.what());
    return std::nullopt;
  }
}

}  // namespace

std::optional<torch::Tensor> read_training_image_or_skip(const std::filesystem::path& image, int64_t size, bool skip,
                                                         const std::string& skip_setting) {
  return read_or_skip([&] { return data::load_training_image(image, size); }, skip, skip_setting);
}

std::optional<torch::Tensor> read_decoded_image_or_skip(const std::filesystem::path& image, bool skip,
                                                        const std::string& skip_setting) {
  return read_or_skip([&] { return data::read_training_image(image); }, skip, skip_setting);
}

}  // namespace tune::recipes::diffusion_common
