// Reading diffusers' SanaTransformer2DModel config.json (models/transformers/sana_transformer.py is the reference
// for every default and for which keys the class takes).
#include "tune/models/sana_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::models {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& message) {
  throw InputError(fmt::format("{}: field '{}' {}", source, key, message));
}

}  // namespace

void SanaConfig::validate(const std::string& source) const {
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0) fail(source, key, fmt::format("must be positive, got {}", value));
  };
  positive("in_channels", in_channels);
  positive("out_channels", out_channels);
  positive("num_attention_heads", num_attention_heads);
  positive("attention_head_dim", attention_head_dim);
  positive("num_layers", num_layers);
  positive("num_cross_attention_heads", num_cross_attention_heads);
  positive("cross_attention_head_dim", cross_attention_head_dim);
  positive("caption_channels", caption_channels);
  positive("sample_size", sample_size);
  positive("patch_size", patch_size);
  if (!(norm_eps > 0)) fail(source, "norm_eps", fmt::format("must be positive, got {}", norm_eps));
  if (!(mlp_ratio > 0) || static_cast<int64_t>(mlp_ratio * static_cast<double>(inner_dim())) <= 0) {
    fail(source, "mlp_ratio", fmt::format("must give a positive GLUMBConv width int(mlp_ratio * {}), got {}",
                                          inner_dim(), mlp_ratio));
  }
  if (cross_attention_dim != inner_dim()) {
    fail(source, "cross_attention_dim",
         fmt::format("is {}, but the caption projection outputs the inner dim num_attention_heads * "
                     "attention_head_dim = {} * {} = {}, which the cross-attention reads (diffusers fails the same "
                     "way); set it to {}", cross_attention_dim, num_attention_heads, attention_head_dim, inner_dim(),
                     inner_dim()));
  }
  if (interpolation_scale) {
    if (!(*interpolation_scale > 0)) {
      fail(source, "interpolation_scale", fmt::format("must be positive or null, got {}", *interpolation_scale));
    }
    if (inner_dim() % 4 != 0) {
      fail(source, "attention_head_dim",
           fmt::format("gives an inner dim {} that is not divisible by 4, which the 2-D sin-cos position table of "
                       "interpolation_scale needs", inner_dim()));
    }
    if (sample_size < patch_size) {
      fail(source, "sample_size", fmt::format("({}) must be at least patch_size ({}): the position table's base "
                                              "grid is sample_size / patch_size", sample_size, patch_size));
    }
  }
}

SanaConfig read_sana_config(const std::filesystem::path& config_json_path) {
  const std::string source = config_json_path.string();
  const nlohmann::json config_json = io::read_json_file(config_json_path, "the Sana transformer's config.json");
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config_json.type_name()));
  }
  const io::JsonFields reader(config_json, source);
  const std::string class_name = reader.string("_class_name", "SanaTransformer2DModel");
  if (class_name != "SanaTransformer2DModel") {
    reader.fail("_class_name", fmt::format("is '{}'; this reader takes diffusers' SanaTransformer2DModel configs (a "
                                           "Sana pipeline's transformer/config.json). ---> HINT: an official NVlabs "
                                           "checkpoint (SanaMS) converts with scripts/convert_sana_official.py",
                                           class_name));
  }
  // Settings that change the maths and that tune does not implement: refused, never ignored.
  if (reader.boolean("guidance_embeds", false)) {
    reader.fail("guidance_embeds", "is true: a guidance-distilled Sana-Sprint transformer (a guidance embedding "
                                   "beside the timestep's), which tune does not implement");
  }
  if (reader.boolean("norm_elementwise_affine", false)) {
    reader.fail("norm_elementwise_affine", "is true; tune implements the released configs' LayerNorms without "
                                           "weight and bias (false)");
  }
  const double dropout = reader.real("dropout", 0.0);
  if (dropout != 0.0) {
    reader.fail("dropout", fmt::format("is {}; tune does not implement dropout in the Sana blocks (only 0.0, as the "
                                       "released configs)", dropout));
  }
  SanaConfig config;
  if (reader.has("qk_norm")) {
    const std::string qk_norm = reader.string("qk_norm");
    if (qk_norm != "rms_norm_across_heads") {
      reader.fail("qk_norm", fmt::format("is '{}'; tune implements null and \"rms_norm_across_heads\" (Sana 1.5)",
                                         qk_norm));
    }
    config.qk_norm = true;
  }
  config.in_channels = reader.positive("in_channels", config.in_channels);
  config.out_channels = reader.has("out_channels") ? reader.positive("out_channels", 0) : config.in_channels;
  config.num_attention_heads = reader.positive("num_attention_heads", config.num_attention_heads);
  config.attention_head_dim = reader.positive("attention_head_dim", config.attention_head_dim);
  config.num_layers = reader.positive("num_layers", config.num_layers);
  // diffusers builds no cross-attention (and then fails in the feed-forward's norm2) for a null
  // cross_attention_dim; every released Sana has one.
  for (const char* key : {"num_cross_attention_heads", "cross_attention_head_dim", "cross_attention_dim"}) {
    if (config_json.contains(key) && config_json.at(key).is_null()) {
      reader.fail(key, "is null; tune implements Sana blocks with cross-attention to the caption only");
    }
  }
  config.num_cross_attention_heads = reader.positive("num_cross_attention_heads", config.num_cross_attention_heads);
  config.cross_attention_head_dim = reader.positive("cross_attention_head_dim", config.cross_attention_head_dim);
  config.cross_attention_dim = reader.positive("cross_attention_dim", config.cross_attention_dim);
  config.caption_channels = reader.positive("caption_channels", config.caption_channels);
  config.mlp_ratio = reader.real("mlp_ratio", config.mlp_ratio);
  config.attention_bias = reader.boolean("attention_bias", config.attention_bias);
  config.sample_size = reader.positive("sample_size", config.sample_size);
  config.patch_size = reader.positive("patch_size", config.patch_size);
  config.norm_eps = reader.real("norm_eps", config.norm_eps);
  if (reader.has("interpolation_scale")) config.interpolation_scale = reader.real("interpolation_scale");
  config.timestep_scale = reader.real("timestep_scale", config.timestep_scale);
  config.validate(source);
  return config;
}

}  // namespace tune::models
