// Building and loading the latte_t2v transformer.
#include "tune/recipes/latte_t2v/t2v_model.h"

#include "tune/recipes/diffusion/diffusers_transformer.h"

namespace tune::recipes::latte_t2v {

models::LatteT2V load_transformer(const std::filesystem::path& config_file, const std::filesystem::path& transformer_dir,
                                  const models::LatteT2VLora& lora,
                                  const std::optional<std::filesystem::path>& checkpoint) {
  models::LatteT2V model(models::read_latte_t2v_config(config_file), lora);
  diffusion_common::load_diffusers_transformer(*model, model->has_lora(), transformer_dir, checkpoint);
  return model;
}

}  // namespace tune::recipes::latte_t2v
