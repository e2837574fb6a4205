// Reading diffusers' LatteTransformer3DModel config.json (models/transformers/latte_transformer_3d.py is the
// reference for every default and for which keys the class takes).
#include "tune/models/latte_t2v_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& message) {
  throw InputError(fmt::format("{}: field '{}' {}", source, key, message));
}

// Keys of diffusers' Transformer2DModel and BasicTransformerBlock that LatteTransformer3DModel does not take, with
// the value that means "the behaviour Latte has". diffusers drops such keys with a warning; a file that sets one to
// anything else was written for another model, so tune refuses it rather than run something else.
struct ForeignKey {
  const char* key;
  json latte_value;
  const char* meaning;
};

const ForeignKey kForeignKeys[] = {
    {"upcast_attention", false, "attention upcast to float32 (a Transformer2DModel setting)"},
    {"only_cross_attention", false, "self-attention replaced by cross-attention"},
    {"double_self_attention", false, "a second self-attention in place of cross-attention"},
    {"num_vector_embeds", nullptr, "discrete (VQ) inputs"},
    {"attention_type", "default", "gated (GLIGEN) attention"},
    {"positional_embeddings", nullptr, "sinusoidal positions added inside every block"},
    {"use_additional_conditions", nullptr, "resolution and aspect-ratio conditioning (PixArt at 1024 px)"},
    {"ff_inner_dim", nullptr, "a feed-forward width other than 4 * inner_dim"},
    {"ff_bias", true, "bias-free feed-forward layers"},
    {"attention_out_bias", true, "a bias-free attention output projection"},
    {"final_dropout", false, "dropout after the feed-forward"},
};

void refuse_foreign_keys(const json& config_json, const std::string& source) {
  for (const auto& foreign : kForeignKeys) {
    if (!config_json.contains(foreign.key)) continue;
    const json& value = config_json.at(foreign.key);
    // use_additional_conditions: false and null both mean "off".
    const bool off = value == foreign.latte_value || (foreign.latte_value.is_null() && value == false);
    if (off) continue;
    fail(source, foreign.key,
         fmt::format("is {}: {}, which LatteTransformer3DModel does not implement (it does not take this key; "
                     "diffusers would drop it and run a different model than the file describes). ---> HINT: remove "
                     "the key, or set it to {}, if the checkpoint really is a Latte-1 transformer",
                     value.dump(), foreign.meaning, foreign.latte_value.dump()));
  }
}

}  // namespace

void LatteT2VConfig::validate(const std::string& source) const {
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0) fail(source, key, fmt::format("must be positive, got {}", value));
  };
  positive("num_attention_heads", num_attention_heads);
  positive("attention_head_dim", attention_head_dim);
  positive("in_channels", in_channels);
  positive("out_channels", out_channels);
  positive("num_layers", num_layers);
  positive("caption_channels", caption_channels);
  positive("sample_size", sample_size);
  positive("patch_size", patch_size);
  positive("video_length", video_length);
  if (num_embeds_ada_norm < 0) fail(source, "num_embeds_ada_norm", fmt::format("must be >= 0, got {}", num_embeds_ada_norm));
  if (!(norm_eps > 0)) fail(source, "norm_eps", fmt::format("must be positive, got {}", norm_eps));
  if (cross_attention_dim != inner_dim()) {
    fail(source, "cross_attention_dim",
         fmt::format("is {}, but the caption projection outputs the inner dim num_attention_heads * "
                     "attention_head_dim = {} * {} = {}, which the cross-attention reads (diffusers fails the same "
                     "way); set it to {}", cross_attention_dim, num_attention_heads, attention_head_dim, inner_dim(),
                     inner_dim()));
  }
  if (inner_dim() % 4 != 0) {
    fail(source, "attention_head_dim",
         fmt::format("gives an inner dim {} * {} = {} that is not divisible by 4, which the 2-D sin-cos position "
                     "table needs (half for the column, half for the row, each sines and cosines)",
                     num_attention_heads, attention_head_dim, inner_dim()));
  }
  if (sample_size < patch_size) {
    fail(source, "sample_size", fmt::format("({}) must be at least patch_size ({}): the 2-D position table's base "
                                            "grid is sample_size / patch_size", sample_size, patch_size));
  }
}

LatteT2VConfig read_latte_t2v_config(const std::filesystem::path& config_json_path) {
  const std::string source = config_json_path.string();
  const json config_json = io::read_json_file(config_json_path, "the Latte transformer's config.json");
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config_json.type_name()));
  }
  const io::JsonFields reader(config_json, source);
  // The official Vchitect/Latte class (models/latte_t2v.py) saves its config under its own name: its parameters are
  // named as diffusers' (diffusers' BasicTransformerBlock, Attention, FeedForward, CaptionProjection and
  // CombinedTimestepSizeEmbeddings; the temporal blocks' norm3 has no parameters), so its checkpoints load as they
  // are. Its extra keys (norm_num_groups, use_linear_projection) only act on non-patch inputs.
  const std::string class_name = reader.string("_class_name", "LatteTransformer3DModel");
  if (class_name != "LatteTransformer3DModel" && class_name != "LatteT2V") {
    reader.fail("_class_name", fmt::format("is '{}'; this reader takes diffusers' LatteTransformer3DModel configs "
                                           "(Latte-1's transformer/config.json) and the official LatteT2V's", class_name));
  }

  // "is 'x'", or for a key the file leaves out, the diffusers default that then applies.
  auto stated = [&](const std::string& key, const std::string& value) {
    return reader.has(key) ? fmt::format("is '{}'", value) : fmt::format("is absent, so diffusers' default '{}' applies", value);
  };
  // Settings that change the maths and that tune does not implement: refused, never ignored.
  const std::string norm_type = reader.string("norm_type", "layer_norm");
  if (norm_type != "ada_norm_single") {
    reader.fail("norm_type", fmt::format("{}; tune implements Latte-1's \"ada_norm_single\" (PixArt's adaLN-single "
                                         "with per-block scale_shift_table) only", stated("norm_type", norm_type)));
  }
  const std::string activation = reader.string("activation_fn", "geglu");
  if (activation != "gelu-approximate") {
    reader.fail("activation_fn", fmt::format("{}; tune implements Latte-1's \"gelu-approximate\" (tanh GELU) "
                                             "feed-forward only", stated("activation_fn", activation)));
  }
  if (reader.boolean("norm_elementwise_affine", true)) {
    reader.fail("norm_elementwise_affine", "is true (or absent: diffusers' default); tune implements LayerNorms "
                                           "without weight and bias only, as Latte-1's config sets (false)");
  }
  const double dropout = reader.real("dropout", 0.0);
  if (dropout != 0.0) {
    reader.fail("dropout", fmt::format("is {}; tune does not implement dropout in the Latte blocks (only 0.0, as "
                                       "Latte-1's config). ---> HINT: set it to 0.0 to train without it", dropout));
  }
  refuse_foreign_keys(config_json, source);

  auto required = [&](const char* key) {
    if (!reader.has(key)) reader.fail(key, "is missing; diffusers' LatteTransformer3DModel has no usable default for it");
    return reader.positive(key, 0);
  };
  LatteT2VConfig config;
  config.num_attention_heads = reader.positive("num_attention_heads", 16);
  config.attention_head_dim = reader.positive("attention_head_dim", 88);
  config.in_channels = required("in_channels");
  config.out_channels = reader.positive("out_channels", config.in_channels);
  config.num_layers = reader.positive("num_layers", 1);
  config.caption_channels = required("caption_channels");
  if (!reader.has("cross_attention_dim")) {
    reader.fail("cross_attention_dim", fmt::format("is missing or null, which gives spatial blocks without "
                                                   "cross-attention (no text conditioning); a text-to-video Latte needs "
                                                   "it equal to the inner dim ({}). HINT: tune's class-conditional "
                                                   "Latte covers the model without text",
                                                   config.num_attention_heads * config.attention_head_dim));
  }
  config.cross_attention_dim = reader.positive("cross_attention_dim", 0);
  config.attention_bias = reader.boolean("attention_bias", false);
  config.sample_size = reader.positive("sample_size", 64);
  if (class_name == "LatteT2V" && config.sample_size == 128) {
    reader.fail("sample_size", "is 128: the official LatteT2V then adds PixArt's resolution and aspect-ratio "
                               "conditioning (use_additional_conditions), which tune does not implement");
  }
  config.patch_size = required("patch_size");
  config.num_embeds_ada_norm = reader.integer("num_embeds_ada_norm", 0);
  config.norm_eps = reader.real("norm_eps", 1e-5);
  config.video_length = reader.positive("video_length", 16);
  config.validate(source);
  return config;
}

}  // namespace tune::models
