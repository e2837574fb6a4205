// Reading and writing diffusers' AutoencoderKL config.json, with every unsupported value reported by file and field.
#include "tune/models/vae_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::models {
namespace {

using nlohmann::json;

const char* const kDownBlockType = "DownEncoderBlock2D";
const char* const kUpBlockType = "UpDecoderBlock2D";


void check_block_types(const io::JsonFields& reader, const std::string& key, const std::vector<std::string>& types,
                       const std::string& expected, size_t block_count) {
  for (size_t index = 0; index < types.size(); ++index) {
    if (types[index] != expected) {
      reader.fail(key, fmt::format("has '{}' at position {}; tune's AutoencoderKL supports only \"{}\" "
                                   "(the block type of every standard Stable Diffusion VAE)",
                                   types[index], index, expected));
    }
  }
  if (types.size() != block_count) {
    reader.fail(key, fmt::format("lists {} block(s) but block_out_channels has {} entries; they must match",
                                 types.size(), block_count));
  }
}

}  // namespace

AutoencoderKLConfig AutoencoderKLConfig::from_json(const json& config_json, const std::string& source) {
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config_json.type_name()));
  }
  const io::JsonFields reader(config_json, source);
  const std::string class_name = reader.string("_class_name", "AutoencoderKL");
  if (class_name != "AutoencoderKL") {
    reader.fail("_class_name", fmt::format("is '{}'; this loader reads AutoencoderKL configs only", class_name));
  }
  AutoencoderKLConfig config;
  config.in_channels = reader.positive("in_channels", config.in_channels);
  config.out_channels = reader.positive("out_channels", config.out_channels);
  config.latent_channels = reader.positive("latent_channels", config.latent_channels);
  config.block_out_channels = reader.positive_list("block_out_channels", config.block_out_channels);
  const size_t blocks = config.block_out_channels.size();
  // diffusers' defaults are one block of each type; a config that omits them but lists several channels
  // means one standard block per entry.
  config.down_block_types = reader.string_list("down_block_types", std::vector<std::string>(blocks, kDownBlockType));
  config.up_block_types = reader.string_list("up_block_types", std::vector<std::string>(blocks, kUpBlockType));
  check_block_types(reader, "down_block_types", config.down_block_types, kDownBlockType, blocks);
  check_block_types(reader, "up_block_types", config.up_block_types, kUpBlockType, blocks);
  config.layers_per_block = reader.positive("layers_per_block", config.layers_per_block);
  config.norm_num_groups = reader.positive("norm_num_groups", config.norm_num_groups);
  for (int64_t channels : config.block_out_channels) {
    if (channels % config.norm_num_groups != 0) {
      reader.fail("norm_num_groups", fmt::format("({}) must divide every entry of block_out_channels [{}]",
                                                 config.norm_num_groups, fmt::join(config.block_out_channels, ", ")));
    }
  }
  config.act_fn = reader.string("act_fn", config.act_fn);
  if (config.act_fn != "silu") {
    reader.fail("act_fn", fmt::format("is '{}'; tune's AutoencoderKL implements only \"silu\"", config.act_fn));
  }
  config.sample_size = reader.positive("sample_size", config.sample_size);
  config.scaling_factor = reader.real("scaling_factor", config.scaling_factor);
  if (!(config.scaling_factor > 0)) {
    reader.fail("scaling_factor", fmt::format("must be positive, got {}", config.scaling_factor));
  }
  config.shift_factor = reader.real("shift_factor", config.shift_factor);
  config.force_upcast = reader.boolean("force_upcast", config.force_upcast);
  config.use_quant_conv = reader.boolean("use_quant_conv", config.use_quant_conv);
  config.use_post_quant_conv = reader.boolean("use_post_quant_conv", config.use_post_quant_conv);
  config.mid_block_add_attention = reader.boolean("mid_block_add_attention", config.mid_block_add_attention);
  // latents_mean / latents_std (a few SDXL-derived VAEs) are pipeline-side normalisation, not read here.
  if (reader.has("latents_mean") || reader.has("latents_std")) {
    reader.fail("latents_mean", "is set; per-channel latent statistics are not supported, only scaling_factor "
                                "and shift_factor. HINT: remove the field if the pipeline does not use it");
  }
  return config;
}

AutoencoderKLConfig AutoencoderKLConfig::from_file(const std::string& config_json_path) {
  return from_json(io::read_json_file(config_json_path, "the VAE's config.json"), config_json_path);
}

json AutoencoderKLConfig::to_json() const {
  json out;
  out["_class_name"] = "AutoencoderKL";
  out["in_channels"] = in_channels;
  out["out_channels"] = out_channels;
  out["latent_channels"] = latent_channels;
  out["block_out_channels"] = block_out_channels;
  out["down_block_types"] = down_block_types;
  out["up_block_types"] = up_block_types;
  out["layers_per_block"] = layers_per_block;
  out["norm_num_groups"] = norm_num_groups;
  out["act_fn"] = act_fn;
  out["sample_size"] = sample_size;
  out["scaling_factor"] = scaling_factor;
  out["shift_factor"] = shift_factor == 0.0 ? json(nullptr) : json(shift_factor);
  out["force_upcast"] = force_upcast;
  out["use_quant_conv"] = use_quant_conv;
  out["use_post_quant_conv"] = use_post_quant_conv;
  out["mid_block_add_attention"] = mid_block_add_attention;
  return out;
}

}  // namespace tune::models
