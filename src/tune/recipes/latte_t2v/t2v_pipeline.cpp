#include "tune/recipes/latte_t2v/t2v_pipeline.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "tune/core/error.h"
#include "tune/io/pipeline_index.h"

namespace tune::recipes::latte_t2v {
namespace {

struct Component {
  const char* name;                       // the component's key in model_index.json and its model.<name> override
  std::vector<std::string> classes;       // the classes tune implements for it
  const std::optional<std::string>* override_path;
  std::filesystem::path* out;
};

}  // namespace

ComponentPaths resolve_components(const PipelineSettings& settings) {
  ComponentPaths paths;
  const std::vector<Component> components = {
      {"transformer", {"LatteTransformer3DModel", "LatteT2V"}, &settings.transformer, &paths.transformer},
      {"vae", {"AutoencoderKL"}, &settings.vae, &paths.vae},
      {"text_encoder", {"T5EncoderModel"}, &settings.text_encoder, &paths.text_encoder},
      {"tokenizer", {"T5Tokenizer", "T5TokenizerFast"}, &settings.tokenizer, &paths.tokenizer},
      {"scheduler", {"DDIMScheduler", "DPMSolverMultistepScheduler"}, &settings.scheduler, &paths.scheduler},
  };
  std::optional<io::PipelineIndex> index;
  if (settings.path) index = io::read_pipeline_index(*settings.path);
  for (const auto& component : components) {
    if (*component.override_path) {
      *component.out = **component.override_path;
    } else if (index) {
      *component.out = index->require(component.name, component.classes).directory;
    } else {
      throw UsageError(fmt::format("no model.path (a diffusers Latte pipeline directory) and no model.{}: set "
                                   "model.path, or give every component's directory",
                                   component.name));
    }
    if (!std::filesystem::is_directory(*component.out)) {
      throw InputError(fmt::format("{}: the {} directory does not exist", component.out->string(), component.name));
    }
  }
  return paths;
}

torch::ScalarType text_encoder_dtype(const std::string& setting, precision::MixedPrecision mixed) {
  if (setting == "fp32") return torch::kFloat32;
  if (setting == "bf16") return torch::kBFloat16;
  return mixed == precision::MixedPrecision::no ? torch::kFloat32 : torch::kBFloat16;
}

}  // namespace tune::recipes::latte_t2v
