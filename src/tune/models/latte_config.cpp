// Latte presets and tune's JSON config for Latte checkpoints.
#include "tune/models/latte_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <set>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::models {
namespace {

using nlohmann::json;

struct SizePreset {
  const char* size;
  int64_t depth, hidden_size, num_heads;
};
constexpr SizePreset kSizes[] = {{"S", 12, 384, 6}, {"B", 12, 768, 12}, {"L", 24, 1024, 16}, {"XL", 28, 1152, 16}};
constexpr int64_t kPatchSizes[] = {2, 4, 8};

const std::vector<std::string> kKeys = {"model_type", "variant", "input_size", "patch_size", "in_channels",
                                        "hidden_size", "depth", "num_heads", "mlp_ratio", "num_frames",
                                        "class_dropout_prob", "num_classes", "learn_sigma", "extras"};

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& message) {
  throw UsageError(fmt::format("{}: field '{}' {}", source, key, message));
}


}  // namespace

void LatteConfig::validate(const std::string& source) const {
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0) fail(source, key, fmt::format("must be positive, got {}", value));
  };
  positive("input_size", input_size);
  positive("patch_size", patch_size);
  positive("in_channels", in_channels);
  positive("hidden_size", hidden_size);
  positive("depth", depth);
  positive("num_heads", num_heads);
  positive("num_frames", num_frames);
  if (extras == 78) {
    fail(source, "extras",
         "is 78 (text-to-video: timestep + CLIP text embedding), which tune does not support. ---> HINT: use "
         "extras 1 (unconditional) or 2 (class-conditional); text-to-video Latte (LatteT2V) is a different model");
  }
  if (extras != 1 && extras != 2) {
    fail(source, "extras", fmt::format("must be 1 (unconditional) or 2 (class-conditional), got {}", extras));
  }
  if (input_size % patch_size != 0) {
    fail(source, "patch_size", fmt::format("{} must divide input_size {}", patch_size, input_size));
  }
  if (hidden_size % num_heads != 0) {
    fail(source, "num_heads", fmt::format("{} must divide hidden_size {}", num_heads, hidden_size));
  }
  if (hidden_size % 4 != 0) {
    fail(source, "hidden_size",
         fmt::format("must be divisible by 4 (the 2D sin-cos position table splits it in even halves), got {}", hidden_size));
  }
  if (depth % 2 != 0) {
    fail(source, "depth", fmt::format("must be even (blocks come in spatial + temporal pairs), got {}", depth));
  }
  if (!(mlp_ratio > 0)) fail(source, "mlp_ratio", fmt::format("must be positive, got {}", mlp_ratio));
  if (!(class_dropout_prob >= 0 && class_dropout_prob < 1)) {
    fail(source, "class_dropout_prob", fmt::format("must be in [0, 1), got {}", class_dropout_prob));
  }
  if (extras == 2 && num_classes <= 0) {
    fail(source, "num_classes", fmt::format("must be positive for a class-conditional model (extras 2), got {}", num_classes));
  }
}

LatteConfig LatteConfig::from_json(const json& object, const std::string& source) {
  if (!object.is_object()) throw UsageError(fmt::format("{}: a Latte config must be a JSON object, got {}", source, object.dump()));
  const std::set<std::string> known(kKeys.begin(), kKeys.end());
  for (const auto& item : object.items()) {
    if (known.count(item.key()) == 0) {
      fail(source, item.key(), fmt::format("is not a Latte config key; known keys: {}", fmt::join(kKeys, ", ")));
    }
  }
  const io::JsonFields fields(object, source, "", io::JsonFields::Blame::config);
  const std::string model_type = fields.string("model_type", "");
  if (model_type != "latte") fail(source, "model_type", fmt::format("must be \"latte\", got \"{}\"", model_type));
  LatteConfig config;
  config.variant = fields.string("variant", config.variant);
  config.input_size = fields.integer("input_size", config.input_size);
  config.patch_size = fields.integer("patch_size", config.patch_size);
  config.in_channels = fields.integer("in_channels", config.in_channels);
  config.hidden_size = fields.integer("hidden_size", config.hidden_size);
  config.depth = fields.integer("depth", config.depth);
  config.num_heads = fields.integer("num_heads", config.num_heads);
  config.mlp_ratio = fields.real("mlp_ratio", config.mlp_ratio);
  config.num_frames = fields.integer("num_frames", config.num_frames);
  config.class_dropout_prob = fields.real("class_dropout_prob", config.class_dropout_prob);
  config.num_classes = fields.integer("num_classes", config.num_classes);
  config.learn_sigma = fields.boolean("learn_sigma", config.learn_sigma);
  config.extras = fields.integer("extras", config.extras);
  config.validate(source);
  return config;
}

LatteConfig LatteConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "the Latte config"), path);
}

json LatteConfig::to_json() const {
  json object;
  object["model_type"] = "latte";
  if (!variant.empty()) object["variant"] = variant;
  object["input_size"] = input_size;
  object["patch_size"] = patch_size;
  object["in_channels"] = in_channels;
  object["hidden_size"] = hidden_size;
  object["depth"] = depth;
  object["num_heads"] = num_heads;
  object["mlp_ratio"] = mlp_ratio;
  object["num_frames"] = num_frames;
  object["class_dropout_prob"] = class_dropout_prob;
  object["num_classes"] = num_classes;
  object["learn_sigma"] = learn_sigma;
  object["extras"] = extras;
  return object;
}

void LatteConfig::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw InputError(fmt::format("cannot write Latte config '{}'", path));
  out << to_json().dump(2) << "\n";
  if (!out) throw InputError(fmt::format("failed writing Latte config '{}'", path));
}

std::vector<std::string> latte_preset_names() {
  std::vector<std::string> names;
  for (const auto& size : kSizes) {
    for (const int64_t patch : kPatchSizes) names.push_back(fmt::format("Latte-{}/{}", size.size, patch));
  }
  return names;
}

LatteConfig latte_preset(const std::string& name) {
  for (const auto& size : kSizes) {
    for (const int64_t patch : kPatchSizes) {
      if (name != fmt::format("Latte-{}/{}", size.size, patch)) continue;
      LatteConfig config;
      config.variant = name;
      config.depth = size.depth;
      config.hidden_size = size.hidden_size;
      config.num_heads = size.num_heads;
      config.patch_size = patch;
      return config;
    }
  }
  throw UsageError(fmt::format("unknown Latte variant '{}'; choose among {}", name, fmt::join(latte_preset_names(), ", ")));
}

}  // namespace tune::models
