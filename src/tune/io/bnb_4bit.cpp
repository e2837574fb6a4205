// bitsandbytes 4-bit checkpoints: quantization_config and the per-weight quant state, with errors that name the key
// or tensor. The reference for every name and default is transformers' BitsAndBytesConfig and bitsandbytes'
// QuantState.as_dict(packed=True), which packs the non-tensor fields into one uint8 tensor of UTF-8 JSON.
#include "tune/io/bnb_4bit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"

namespace tune::io {
namespace {

using nlohmann::json;

// Dtype names as transformers and bitsandbytes write them (str(torch.dtype) without "torch.").
std::optional<torch::ScalarType> dtype_named(std::string name) {
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  static const std::map<std::string, torch::ScalarType> names = {
      {"float32", torch::kFloat32}, {"float", torch::kFloat32},   {"bfloat16", torch::kBFloat16},
      {"float16", torch::kFloat16}, {"half", torch::kFloat16},    {"float64", torch::kFloat64},
      {"uint8", torch::kUInt8},     {"int8", torch::kInt8},       {"int16", torch::kInt16},
      {"int32", torch::kInt32},     {"int64", torch::kInt64}};
  const auto found = names.find(name);
  if (found == names.end()) return std::nullopt;
  return found->second;
}

// Reads a dtype-name field and checks it is one of `allowed`.
torch::ScalarType dtype_field(const JsonFields& fields, const std::string& key, const std::string& fallback,
                              const std::vector<torch::ScalarType>& allowed) {
  const std::string name = fields.string(key, fallback);
  const auto dtype = dtype_named(name);
  if (!dtype || std::find(allowed.begin(), allowed.end(), *dtype) == allowed.end()) {
    std::vector<std::string> names;
    for (const auto type : allowed) names.emplace_back(c10::toString(type));
    fields.fail(key, fmt::format("is '{}', expected one of {} (as torch names them)", name, fmt::join(names, ", ")));
  }
  return *dtype;
}

const std::vector<torch::ScalarType> kWeightDtypes = {torch::kBFloat16, torch::kFloat16, torch::kFloat32};

[[noreturn]] void fail_tensor(const std::string& origin, const std::string& name, const std::string& message) {
  throw InputError(fmt::format("{}: tensor '{}' {}", origin, name, message));
}

torch::Tensor required(const TensorLookup& lookup, const std::string& origin, const std::string& name,
                       const std::string& why) {
  torch::Tensor tensor = lookup(name);
  if (!tensor.defined()) fail_tensor(origin, name, fmt::format("is missing ({})", why));
  return tensor.to(torch::kCPU).contiguous();
}

// The JSON bitsandbytes packed into a uint8 tensor.
json unpack_json(const torch::Tensor& tensor, const std::string& origin, const std::string& name) {
  if (tensor.scalar_type() != torch::kUInt8 || tensor.dim() != 1) {
    fail_tensor(origin, name, fmt::format("must be a 1-D uint8 tensor of JSON text, got {} with {} dimensions",
                                          c10::toString(tensor.scalar_type()), tensor.dim()));
  }
  const auto* bytes = tensor.data_ptr<uint8_t>();
  const std::string text(reinterpret_cast<const char*>(bytes), static_cast<size_t>(tensor.numel()));
  try {
    json state = json::parse(text);
    if (!state.is_object()) fail_tensor(origin, name, fmt::format("must hold a JSON object, got {}", text));
    return state;
  } catch (const json::parse_error& error) {
    fail_tensor(origin, name, fmt::format("does not hold valid JSON ({})", error.what()));
  }
}

}  // namespace

BnbQuantizationConfig parse_bnb_quantization_config(const json& quantization_config, const std::string& source) {
  if (!quantization_config.is_object()) {
    throw InputError(fmt::format("{}: field 'quantization_config' must be an object, got {}", source,
                                 quantization_config.dump()));
  }
  const JsonFields fields(quantization_config, source, "quantization_config.");
  const std::string method = fields.string("quant_method", "bitsandbytes");
  if (method != "bitsandbytes") {
    fields.fail("quant_method", fmt::format("is '{}'; tune reads only bitsandbytes 4-bit (NF4) checkpoints", method));
  }
  if (fields.boolean("load_in_8bit", false)) {
    fields.fail("load_in_8bit", "is true; tune reads bitsandbytes 4-bit (NF4) weights, not 8-bit (LLM.int8) ones");
  }
  // BitsAndBytesConfig.to_dict() writes both "load_in_4bit" and the private "_load_in_4bit".
  const bool four_bit = fields.boolean("load_in_4bit", fields.boolean("_load_in_4bit", false));
  if (!four_bit) fields.fail("load_in_4bit", "is false or missing; tune reads bitsandbytes 4-bit (NF4) weights only");
  const std::string quant_type = fields.string("bnb_4bit_quant_type", "fp4");  // the class default is fp4
  if (quant_type == "fp4") {
    fields.fail("bnb_4bit_quant_type", "is 'fp4' (BitsAndBytesConfig's default when the key is absent); tune reads "
                                       "NF4 only: HINT: quantise the model with bnb_4bit_quant_type=\"nf4\"");
  }
  if (quant_type != "nf4") fields.fail("bnb_4bit_quant_type", fmt::format("is '{}', expected 'nf4'", quant_type));

  BnbQuantizationConfig config;
  config.double_quant = fields.boolean("bnb_4bit_use_double_quant", false);
  config.compute_dtype = dtype_field(fields, "bnb_4bit_compute_dtype", "float32", kWeightDtypes);
  config.quant_storage = dtype_field(fields, "bnb_4bit_quant_storage", "uint8",
                                     {torch::kUInt8, torch::kInt8, torch::kInt16, torch::kInt32, torch::kInt64,
                                      torch::kBFloat16, torch::kFloat16, torch::kFloat32, torch::kFloat64});
  // An empty list is valid (quantise everything); string_list refuses empty lists, so it is taken apart here.
  if (fields.has("llm_int8_skip_modules")) {
    const json& modules = quantization_config.at("llm_int8_skip_modules");
    config.skip_modules = modules.is_array() && modules.empty()
                              ? std::vector<std::string>{}
                              : fields.string_list("llm_int8_skip_modules", {});
  }
  return config;
}

bool is_bnb_4bit_weight(const WeightSource& source, const std::string& weight_name) {
  return source.contains(weight_name + ".quant_state.bitsandbytes__nf4") ||
         source.contains(weight_name + ".quant_state.bitsandbytes__fp4");
}

precision::Nf4Tensor read_bnb_4bit_weight(const TensorLookup& lookup, const std::string& weight_name,
                                          const std::string& origin) {
  const std::string fp4_state = weight_name + ".quant_state.bitsandbytes__fp4";
  if (lookup(fp4_state).defined()) {
    fail_tensor(origin, fp4_state, "marks an FP4 weight (bnb_4bit_quant_type \"fp4\"); tune reads NF4 weights only");
  }
  const std::string state_name = weight_name + ".quant_state.bitsandbytes__nf4";
  const json state = unpack_json(
      required(lookup, origin, state_name, "bitsandbytes writes it beside every 4-bit weight"), origin, state_name);
  const JsonFields fields(state, fmt::format("{}: tensor '{}'", origin, state_name));

  precision::Nf4Tensor result;
  const std::string quant_type = fields.string("quant_type");
  if (quant_type != "nf4") fields.fail("quant_type", fmt::format("is '{}', expected 'nf4'", quant_type));
  result.blocksize = fields.integer("blocksize");
  if (!fields.has("dtype")) fields.fail("dtype", "is missing");
  result.dtype = dtype_field(fields, "dtype", "", kWeightDtypes);
  if (!fields.has("shape")) fields.fail("shape", "is missing");
  result.shape = fields.positive_list("shape", {});

  // bnb_4bit_quant_storage: the same bytes under another dtype ([bytes / itemsize, 1]); read them back as uint8.
  const torch::Tensor stored = required(lookup, origin, weight_name, "the packed 4-bit weight");
  result.packed = stored.reshape({-1}).view(torch::kUInt8);
  const int64_t expected_bytes = (result.numel() + 1) / 2;
  if (result.packed.numel() != expected_bytes) {
    fail_tensor(origin, weight_name, fmt::format("holds {} bytes ({} [{}]), but shape [{}] packs into {} bytes",
                                                 result.packed.numel(), c10::toString(stored.scalar_type()),
                                                 fmt::join(stored.sizes(), ", "), fmt::join(result.shape, ", "),
                                                 expected_bytes));
  }
  result.absmax = required(lookup, origin, weight_name + ".absmax", "the per-block scales").reshape({-1});
  result.code = required(lookup, origin, weight_name + ".quant_map", "the NF4 code book").reshape({-1});

  const torch::Tensor nested_absmax = lookup(weight_name + ".nested_absmax");
  if (nested_absmax.defined()) {
    result.nested_absmax = nested_absmax.to(torch::kCPU).contiguous().reshape({-1});
    result.nested_code = required(lookup, origin, weight_name + ".nested_quant_map",
                                  "double quantisation's 8-bit map").reshape({-1});
    result.nested_blocksize = fields.integer("nested_blocksize");
    dtype_field(fields, "nested_dtype", "float32", {torch::kFloat32});
    result.offset = static_cast<float>(fields.real("nested_offset"));
  }
  precision::check_nf4(result, fmt::format("{}: weight '{}'", origin, weight_name));
  return result;
}

precision::Nf4Tensor read_bnb_4bit_weight(const WeightSource& source, const std::string& weight_name) {
  const TensorLookup lookup = [&source](const std::string& name) {
    return source.contains(name) ? source.load(name) : torch::Tensor();
  };
  const std::string origin =
      source.contains(weight_name) ? source.file_of(weight_name).path().string() : source.origin().string();
  return read_bnb_4bit_weight(lookup, weight_name, origin);
}

}  // namespace tune::io
