// Reading diffusers' AutoencoderDC config.json: diffusers' defaults for missing fields, every unimplemented value
// (and every channel count the blocks cannot reshape) refused with the file, the field and what is accepted.
#include "tune/models/dc_ae_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::models {
namespace {

using nlohmann::json;

const char* const kActivations = "\"silu\", \"swish\", \"relu\", \"gelu\", \"mish\"";

// diffusers accepts a single string for a per-stage setting and repeats it for every stage.
std::vector<std::string> per_stage_strings(const io::JsonFields& reader, const json& object, const std::string& key,
                                           std::vector<std::string> fallback, size_t stages) {
  if (object.contains(key) && object.at(key).is_string()) {
    return std::vector<std::string>(stages, object.at(key).get<std::string>());
  }
  if (!reader.has(key)) return std::vector<std::string>(stages, fallback.front());
  auto values = reader.string_list(key, std::move(fallback));
  if (values.size() != stages) {
    reader.fail(key, fmt::format("lists {} value(s) but the block_out_channels have {} stages; they must match",
                                 values.size(), stages));
  }
  return values;
}

std::vector<int64_t> layer_counts(const io::JsonFields& reader, const json& object, const std::string& key,
                                  std::vector<int64_t> fallback, size_t stages) {
  if (!reader.has(key)) {
    if (fallback.size() != stages) {
      reader.fail(key, fmt::format("is missing, and diffusers' default has {} stages, not {}; give it explicitly",
                                   fallback.size(), stages));
    }
    return fallback;
  }
  const json& value = object.at(key);
  if (!value.is_array() || value.size() != stages) {
    reader.fail(key, fmt::format("must be a list of {} block counts (one per stage of block_out_channels), got {}",
                                 stages, value.dump()));
  }
  std::vector<int64_t> counts;
  for (size_t stage = 0; stage < stages; ++stage) {
    const json& count = value[stage];
    if (!count.is_number_integer() || count.get<int64_t>() <= 0) {
      // diffusers accepts 0 (the DC-AE "in"/"mix" models' first stage), which changes conv_in/conv_out themselves.
      reader.fail(key, fmt::format("has {} at stage {}; tune's AutoencoderDC accepts only positive block counts (a "
                                   "stage without blocks is not implemented)", count.dump(), stage));
    }
    counts.push_back(count.get<int64_t>());
  }
  return counts;
}

std::vector<std::vector<int64_t>> multiscales(const io::JsonFields& reader, const json& object, const std::string& key,
                                              std::vector<std::vector<int64_t>> fallback, size_t stages) {
  if (!reader.has(key)) {
    if (fallback.size() != stages) {
      reader.fail(key, fmt::format("is missing, and diffusers' default has {} stages, not {}; give it explicitly",
                                   fallback.size(), stages));
    }
    return fallback;
  }
  const json& value = object.at(key);
  const auto bad = [&] {
    reader.fail(key, fmt::format("must be a list of {} lists of odd positive kernel sizes, got {}", stages,
                                 value.dump()));
  };
  if (!value.is_array() || value.size() != stages) bad();
  std::vector<std::vector<int64_t>> result;
  for (const json& stage : value) {
    if (!stage.is_array()) bad();
    std::vector<int64_t> kernels;
    for (const json& kernel : stage) {
      // An even kernel would change the spatial size with diffusers' padding of kernel // 2.
      if (!kernel.is_number_integer() || kernel.get<int64_t>() <= 0 || kernel.get<int64_t>() % 2 == 0) bad();
      kernels.push_back(kernel.get<int64_t>());
    }
    result.push_back(std::move(kernels));
  }
  return result;
}

void check_block_types(const io::JsonFields& reader, const std::string& key, const std::vector<std::string>& types) {
  for (size_t stage = 0; stage < types.size(); ++stage) {
    if (types[stage] != "ResBlock" && types[stage] != "EfficientViTBlock") {
      reader.fail(key, fmt::format("has '{}' at stage {}; accepted: \"ResBlock\", \"EfficientViTBlock\"",
                                   types[stage], stage));
    }
  }
}

void check_activations(const io::JsonFields& reader, const std::string& key, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (!is_supported_dc_ae_activation(name)) {
      reader.fail(key, fmt::format("has '{}'; accepted: {}", name, kActivations));
    }
  }
}

}  // namespace

bool is_supported_dc_ae_activation(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower == "silu" || lower == "swish" || lower == "relu" || lower == "gelu" || lower == "mish";
}

AutoencoderDCConfig AutoencoderDCConfig::from_json(const json& config_json, const std::string& source) {
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config_json.type_name()));
  }
  const io::JsonFields reader(config_json, source);
  const std::string class_name = reader.string("_class_name", "AutoencoderDC");
  if (class_name != "AutoencoderDC") {
    reader.fail("_class_name", fmt::format("is '{}'; this loader reads AutoencoderDC configs only", class_name));
  }
  AutoencoderDCConfig c;
  c.in_channels = reader.positive("in_channels", c.in_channels);
  c.latent_channels = reader.positive("latent_channels", c.latent_channels);
  c.attention_head_dim = reader.positive("attention_head_dim", c.attention_head_dim);
  c.encoder_block_out_channels = reader.positive_list("encoder_block_out_channels", c.encoder_block_out_channels);
  c.decoder_block_out_channels = reader.positive_list("decoder_block_out_channels", c.decoder_block_out_channels);
  const size_t stages = c.encoder_block_out_channels.size();
  if (c.decoder_block_out_channels.size() != stages) {
    reader.fail("decoder_block_out_channels",
                fmt::format("has {} stages but encoder_block_out_channels has {}; the decoder must undo the encoder's "
                            "2^(stages-1) downscale", c.decoder_block_out_channels.size(), stages));
  }
  c.encoder_block_types = per_stage_strings(reader, config_json, "encoder_block_types", c.encoder_block_types, stages);
  c.decoder_block_types = per_stage_strings(reader, config_json, "decoder_block_types", c.decoder_block_types, stages);
  check_block_types(reader, "encoder_block_types", c.encoder_block_types);
  check_block_types(reader, "decoder_block_types", c.decoder_block_types);
  c.encoder_layers_per_block =
      layer_counts(reader, config_json, "encoder_layers_per_block", c.encoder_layers_per_block, stages);
  c.decoder_layers_per_block =
      layer_counts(reader, config_json, "decoder_layers_per_block", c.decoder_layers_per_block, stages);
  c.encoder_qkv_multiscales =
      multiscales(reader, config_json, "encoder_qkv_multiscales", c.encoder_qkv_multiscales, stages);
  c.decoder_qkv_multiscales =
      multiscales(reader, config_json, "decoder_qkv_multiscales", c.decoder_qkv_multiscales, stages);

  c.upsample_block_type = reader.string("upsample_block_type", c.upsample_block_type);
  if (c.upsample_block_type != "pixel_shuffle" && c.upsample_block_type != "interpolate") {
    reader.fail("upsample_block_type",
                fmt::format("is '{}'; accepted: \"pixel_shuffle\", \"interpolate\"", c.upsample_block_type));
  }
  c.downsample_block_type = reader.string("downsample_block_type", c.downsample_block_type);
  if (c.downsample_block_type != "pixel_unshuffle" && c.downsample_block_type != "Conv") {
    reader.fail("downsample_block_type",
                fmt::format("is '{}'; accepted: \"pixel_unshuffle\", \"Conv\"", c.downsample_block_type));
  }
  c.decoder_norm_types = per_stage_strings(reader, config_json, "decoder_norm_types", c.decoder_norm_types, stages);
  for (const auto& norm : c.decoder_norm_types) {
    if (norm != "rms_norm") {
      reader.fail("decoder_norm_types", fmt::format("has '{}'; tune's AutoencoderDC implements only \"rms_norm\" "
                                                    "(the Sana VAE's)", norm));
    }
  }
  c.decoder_act_fns = per_stage_strings(reader, config_json, "decoder_act_fns", c.decoder_act_fns, stages);
  check_activations(reader, "decoder_act_fns", c.decoder_act_fns);
  c.encoder_out_shortcut = reader.boolean("encoder_out_shortcut", c.encoder_out_shortcut);
  c.decoder_in_shortcut = reader.boolean("decoder_in_shortcut", c.decoder_in_shortcut);
  c.decoder_conv_act_fn = reader.string("decoder_conv_act_fn", c.decoder_conv_act_fn);
  check_activations(reader, "decoder_conv_act_fn", {c.decoder_conv_act_fn});
  c.scaling_factor = reader.real("scaling_factor", c.scaling_factor);
  if (!(c.scaling_factor > 0)) reader.fail("scaling_factor", fmt::format("must be positive, got {}", c.scaling_factor));

  // Channel counts the shortcuts (means over channel groups, repeated channels) and heads need to divide.
  const auto& encoder = c.encoder_block_out_channels;
  const auto& decoder = c.decoder_block_out_channels;
  for (size_t stage = 0; stage + 1 < stages; ++stage) {
    if ((4 * encoder[stage]) % encoder[stage + 1] != 0 ||
        (c.downsample_block_type == "pixel_unshuffle" && encoder[stage + 1] % 4 != 0)) {
      reader.fail("encoder_block_out_channels",
                  fmt::format("[{}]: stage {} -> {} ({} -> {}) needs 4*{} divisible by {}{}", fmt::join(encoder, ", "),
                              stage, stage + 1, encoder[stage], encoder[stage + 1], encoder[stage], encoder[stage + 1],
                              c.downsample_block_type == "pixel_unshuffle" ? " and a multiple of 4" : ""));
    }
    if ((4 * decoder[stage]) % decoder[stage + 1] != 0) {
      reader.fail("decoder_block_out_channels",
                  fmt::format("[{}]: stage {} -> {} ({} -> {}) needs 4*{} divisible by {}",
                              fmt::join(decoder, ", "), stage + 1, stage, decoder[stage + 1], decoder[stage],
                              decoder[stage], decoder[stage + 1]));
    }
  }
  if (c.encoder_out_shortcut && encoder.back() % c.latent_channels != 0) {
    reader.fail("encoder_out_shortcut", fmt::format("is true but latent_channels {} does not divide the last encoder "
                                                    "channels {}", c.latent_channels, encoder.back()));
  }
  if (c.decoder_in_shortcut && decoder.back() % c.latent_channels != 0) {
    reader.fail("decoder_in_shortcut", fmt::format("is true but latent_channels {} does not divide the last decoder "
                                                   "channels {}", c.latent_channels, decoder.back()));
  }
  for (size_t stage = 0; stage < stages; ++stage) {
    const bool encoder_attention = c.encoder_block_types[stage] == "EfficientViTBlock";
    const bool decoder_attention = c.decoder_block_types[stage] == "EfficientViTBlock";
    if ((encoder_attention && encoder[stage] < c.attention_head_dim) ||
        (decoder_attention && decoder[stage] < c.attention_head_dim)) {
      reader.fail("attention_head_dim", fmt::format("({}) exceeds the channels of EfficientViT stage {}: no whole "
                                                    "head fits", c.attention_head_dim, stage));
    }
  }
  return c;
}

AutoencoderDCConfig AutoencoderDCConfig::from_file(const std::string& config_json_path) {
  return from_json(io::read_json_file(config_json_path, "the VAE's config.json"), config_json_path);
}

}  // namespace tune::models
