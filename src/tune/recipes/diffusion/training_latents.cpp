// Preparing the latents a training run needs when the recipe names none (training_latents.h).
#include "tune/recipes/diffusion/training_latents.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/recipes/data_parallel.h"

namespace tune::recipes::diffusion_common {

std::optional<std::filesystem::path> training_latents(const TrainRequest& request,
                                                      const std::optional<std::string>& latents,
                                                      const std::optional<std::string>& data_path,
                                                      const std::function<int(const PrepareRequest&)>& prepare) {
  if (latents) return std::filesystem::path(*latents);
  if (!data_path) return std::nullopt;
  const std::filesystem::path directory = request.output_dir / kRunLatentsFolder;
  run_on_main_rank(
      [&] {
        log::info("data.latents is not set: preparing {} from {} first (as tune prepare: caption embeddings, then "
                  "latents; both encoders are freed before training starts)", directory.string(), *data_path);
        PrepareRequest preparation{request.config, directory, 1};
        const int code = prepare(preparation);
        if (code != 0) throw Error(fmt::format("preparing {} failed (exit {})", directory.string(), code));
      },
      "prepare the training latents");
  return directory;
}

}  // namespace tune::recipes::diffusion_common
