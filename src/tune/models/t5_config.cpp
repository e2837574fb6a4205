// Reading a T5 config.json (transformers 5's models/t5/configuration_t5.py is the reference for every default and
// for how feed_forward_proj becomes the activation).
#include "tune/models/t5_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"

namespace tune::models {
namespace {

// feed_forward_proj is "ACT" or "gated-ACT"; T5Config turns "gated-gelu" into gelu_new (the tanh form T5 v1.1
// was trained with), while a plain "gelu" stays the erf form.
void read_feed_forward(const io::JsonFields& reader, T5EncoderConfig& config) {
  const std::string projection = reader.string("feed_forward_proj", "relu");
  const size_t dash = projection.find('-');
  const bool gated = dash != std::string::npos;
  if (gated && (projection.substr(0, dash) != "gated" || projection.find('-', dash + 1) != std::string::npos)) {
    reader.fail("feed_forward_proj", fmt::format("is '{}'; transformers accepts 'ACT' or 'gated-ACT' (e.g. "
                                                 "'gated-gelu', 'relu')", projection));
  }
  std::string activation = gated ? projection.substr(dash + 1) : projection;
  if (projection == "gated-gelu") activation = "gelu_new";
  if (std::find(kT5Activations.begin(), kT5Activations.end(), activation) == kT5Activations.end()) {
    reader.fail("feed_forward_proj", fmt::format("is '{}', whose activation '{}' tune's T5 does not implement "
                                                 "(supported: {}, each plain or 'gated-')",
                                                 projection, activation, fmt::join(kT5Activations, ", ")));
  }
  config.is_gated_act = gated;
  config.dense_act_fn = activation;
}

}  // namespace

T5EncoderConfig t5_encoder_config_from_json(const nlohmann::json& config_json, const std::string& source) {
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", source, config_json.type_name()));
  }
  const io::JsonFields reader(config_json, source);
  const std::string model_type = reader.string("model_type", "");
  if (model_type != "t5") {
    reader.fail("model_type", fmt::format("is '{}'; tune's T5 encoder reads only 't5' configs (T5EncoderModel, "
                                          "T5ForConditionalGeneration)", model_type));
  }
  T5EncoderConfig config;
  config.vocab_size = reader.positive("vocab_size", config.vocab_size);
  config.d_model = reader.positive("d_model", config.d_model);
  config.d_kv = reader.positive("d_kv", config.d_kv);
  config.d_ff = reader.positive("d_ff", config.d_ff);
  config.num_layers = reader.positive("num_layers", config.num_layers);
  config.num_heads = reader.positive("num_heads", config.num_heads);
  config.relative_attention_num_buckets =
      reader.positive("relative_attention_num_buckets", config.relative_attention_num_buckets);
  config.relative_attention_max_distance =
      reader.positive("relative_attention_max_distance", config.relative_attention_max_distance);
  config.layer_norm_epsilon = reader.real("layer_norm_epsilon", config.layer_norm_epsilon);
  read_feed_forward(reader, config);

  // Half the buckets per direction, half of those exact: fewer than 4 leaves no exact bucket and a log of 0.
  const int64_t exact_buckets = config.relative_attention_num_buckets / 2 / 2;
  if (exact_buckets < 1) {
    reader.fail("relative_attention_num_buckets",
                fmt::format("is {}; T5's bidirectional buckets need at least 4", config.relative_attention_num_buckets));
  }
  if (config.relative_attention_max_distance <= exact_buckets) {
    reader.fail("relative_attention_max_distance",
                fmt::format("is {}; it must exceed the {} exactly bucketed distances (relative_attention_num_buckets "
                            "/ 4), or the logarithmic buckets are undefined",
                            config.relative_attention_max_distance, exact_buckets));
  }
  if (config.layer_norm_epsilon <= 0) {
    reader.fail("layer_norm_epsilon", fmt::format("must be positive, got {}", config.layer_norm_epsilon));
  }
  // The encoder stack of a config marked as a decoder would attend causally; T5EncoderModel passes the flag on.
  if (reader.boolean("is_decoder", false)) {
    reader.fail("is_decoder", "is true, which makes T5's stack causal; tune implements the bidirectional encoder "
                              "only (HINT: a text encoder's config.json has is_decoder false)");
  }
  if (reader.has("quantization_config")) {
    reader.fail("quantization_config", "is set; tune's T5 encoder loads unquantised weights only (float32, "
                                       "bfloat16 or float16 files)");
  }
  return config;
}

T5EncoderConfig read_t5_encoder_config(const std::filesystem::path& config_json) {
  return t5_encoder_config_from_json(io::read_json_file(config_json, "the T5 encoder's config.json"),
                                     config_json.string());
}

}  // namespace tune::models
