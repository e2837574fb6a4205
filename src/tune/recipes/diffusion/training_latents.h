// Training a text-conditioned diffusion model straight from captioned videos or images: when the recipe names no
// data.latents, `tune prepare`'s work (the text encoder's caption embeddings, then the VAE's latents, each encoder
// freed before the next) is done first into the run directory's latents/ folder, so the training loop itself still
// holds neither encoder. The folder stays: --resume and later runs with data.latents pointing at it reuse it, and an
// interrupted preparation goes on from the files it finished.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "tune/recipes/recipe.h"

namespace tune::recipes::diffusion_common {

inline constexpr const char* kRunLatentsFolder = "latents";

// data.latents when set; otherwise, with data.path set, the run directory's latents/ folder after the main rank has
// prepared it with `prepare` (the recipe's own tune prepare; every rank waits for it). Neither set: nullopt (the
// recipe reports the missing key).
std::optional<std::filesystem::path> training_latents(const TrainRequest& request,
                                                      const std::optional<std::string>& latents,
                                                      const std::optional<std::string>& data_path,
                                                      const std::function<int(const PrepareRequest&)>& prepare);

}  // namespace tune::recipes::diffusion_common
