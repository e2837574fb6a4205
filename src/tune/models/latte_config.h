// Latte (Vchitect/Latte, models/latte.py) architecture settings, the official size presets (Latte-S/B/L/XL with
// patch 2/4/8) and tune's own JSON form of them, written beside converted checkpoints as config.json:
//
//   {"model_type": "latte", "variant": "Latte-S/2", "input_size": 32, "patch_size": 2, "in_channels": 4,
//    "hidden_size": 384, "depth": 12, "num_heads": 6, "mlp_ratio": 4.0, "num_frames": 16,
//    "class_dropout_prob": 0.1, "num_classes": 1000, "learn_sigma": true, "extras": 1}
//
// Every key but "model_type" is optional and defaults to the field's default below ("variant" is informational:
// the numbers are what count). Unknown keys and wrong types are errors.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tune::models {

struct LatteConfig {
  std::string variant;              // preset name it came from, e.g. "Latte-XL/2"; empty for a custom size
  int64_t input_size = 32;          // latent height = width
  int64_t patch_size = 2;           // must divide input_size
  int64_t in_channels = 4;          // latent channels
  int64_t hidden_size = 1152;       // divisible by num_heads and by 4 (2D sin-cos table)
  int64_t depth = 28;               // even: blocks alternate spatial (even index), temporal (odd index)
  int64_t num_heads = 16;
  double mlp_ratio = 4.0;           // MLP inner size = int(hidden_size * mlp_ratio)
  int64_t num_frames = 16;          // frames per clip; inputs must have exactly this many (temp_embed size)
  double class_dropout_prob = 0.1;  // label dropout for classifier-free guidance; > 0 adds a null-class row
  int64_t num_classes = 1000;       // extras = 2 only
  bool learn_sigma = true;          // output channels 2 * in_channels (noise and variance)
  int64_t extras = 1;               // 1: unconditional (timestep only), 2: class-conditional; 78 (text) unsupported

  int64_t out_channels() const { return learn_sigma ? 2 * in_channels : in_channels; }
  int64_t grid_size() const { return input_size / patch_size; }
  int64_t num_patches() const { return grid_size() * grid_size(); }
  int64_t mlp_hidden_size() const { return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio); }
  bool class_conditional() const { return extras == 2; }
  // Rows of y_embedder.embedding_table: num_classes, plus the null class when class dropout is on.
  int64_t embedding_rows() const { return num_classes + (class_dropout_prob > 0 ? 1 : 0); }

  // Throws tune::UsageError naming `source` (a file, or "Latte config"), the field, the value and the fix.
  void validate(const std::string& source = "Latte config") const;

  static LatteConfig from_json(const nlohmann::json& json, const std::string& source);
  static LatteConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
  void save(const std::string& path) const;  // pretty-printed to_json()
};

// The official Latte_models table: "Latte-S/2" ... "Latte-XL/8" (depth 12/12/24/28, hidden 384/768/1024/1152,
// heads 6/12/16/16), other fields at the official constructor's defaults (input_size 32, in_channels 4,
// num_frames 16, num_classes 1000, learn_sigma true, extras 1). Unknown names throw UsageError listing the valid ones.
LatteConfig latte_preset(const std::string& name);
std::vector<std::string> latte_preset_names();

}  // namespace tune::models
