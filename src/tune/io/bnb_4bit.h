// Reading the 4-bit weights that transformers + bitsandbytes save (save_pretrained of a model loaded with
// BitsAndBytesConfig(load_in_4bit=True)): config.json's quantization_config, and per quantised Linear the packed
// weight plus the quant-state tensors beside it. The format and its rules are bitsandbytes' QuantState.as_dict /
// from_dict (bitsandbytes/functional.py); the values come out as precision::Nf4Tensor.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tune/io/weights.h"
#include "tune/precision/nf4.h"

namespace tune::io {

// config.json's "quantization_config" as BitsAndBytesConfig.to_dict() writes it, reduced to what a 4-bit NF4 reader
// needs. Defaults are BitsAndBytesConfig's own for a key left out.
struct BnbQuantizationConfig {
  bool double_quant = false;                          // bnb_4bit_use_double_quant
  torch::ScalarType compute_dtype = torch::kFloat32;  // bnb_4bit_compute_dtype: the dtype transformers computes in
  torch::ScalarType quant_storage = torch::kUInt8;    // bnb_4bit_quant_storage: the dtype the packed bytes are saved as
  // llm_int8_skip_modules: module names (or name parts) left unquantised; nullopt when null or absent, where
  // transformers leaves the output layer (lm_head) and tied weights unquantised by its own rule.
  std::optional<std::vector<std::string>> skip_modules;
};

// Parses `quantization_config` (the object under that key); `source` names the file in errors (".../config.json").
// Throws tune::InputError naming the key ("config.json: field 'quantization_config.bnb_4bit_quant_type' is 'fp4'
// ...") for: a quant_method other than bitsandbytes, 8-bit (load_in_8bit), load_in_4bit false, a quant type other
// than nf4 (FP4 is refused by name), an unknown dtype name, or a value of the wrong JSON type.
BnbQuantizationConfig parse_bnb_quantization_config(const nlohmann::json& quantization_config,
                                                    const std::string& source);

// The tensor of that name, or an undefined tensor when the checkpoint has none (so optional tensors can be probed).
using TensorLookup = std::function<torch::Tensor(const std::string& name)>;

// What bitsandbytes saves beside "<module>.weight" (each name is the weight's name + suffix); a loader that maps file
// tensors to parameters skips these.
inline constexpr std::array<const char*, 6> kBnb4bitStateSuffixes = {
    ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".quant_state.bitsandbytes__nf4",
    ".quant_state.bitsandbytes__fp4"};

// transformers' rule: "<module>.weight" is 4-bit packed iff "<module>.weight.quant_state.bitsandbytes__nf4" (or
// __fp4) exists. `weight_name` is the full name, e.g. "model.layers.0.self_attn.q_proj.weight".
bool is_bnb_4bit_weight(const WeightSource& source, const std::string& weight_name);

// Reads one pre-quantised weight: the packed bytes (any stored dtype, reinterpreted as uint8: bnb_4bit_quant_storage),
// absmax, quant_map, the nested statistics when double-quantised, and the JSON quant state (quant_type, blocksize,
// dtype, shape, nested_blocksize, nested_dtype, nested_offset). `origin` names the file or directory in errors.
// Throws tune::InputError naming the tensor: a missing tensor, an FP4 weight (refused by name), malformed JSON, a
// byte count that does not match the shape, or any inconsistency precision::check_nf4 finds.
precision::Nf4Tensor read_bnb_4bit_weight(const TensorLookup& lookup, const std::string& weight_name,
                                          const std::string& origin);
precision::Nf4Tensor read_bnb_4bit_weight(const WeightSource& source, const std::string& weight_name);

}  // namespace tune::io
