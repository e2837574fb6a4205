// The weights sampling reads from a Latte checkpoint.
#include "tune/recipes/latte/latte_checkpoint.h"

#include "tune/recipes/diffusion/diffusion_checkpoint.h"
#include "tune/recipes/latte/latte_model.h"

namespace tune::recipes::latte {

void load_sampling_weights(const std::filesystem::path& dir, models::Latte& model) {
  load_latte_weights(model, diffusion_common::sampling_weights_file(dir));
}

}  // namespace tune::recipes::latte
