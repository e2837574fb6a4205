// The table between safetensors dtype names and LibTorch scalar types.
#include "tune/io/dtypes.h"

#include <array>
#include <utility>

#include <fmt/format.h>

#include "tune/core/error.h"

namespace tune::io {
namespace {

// One table read both ways keeps the two directions from drifting apart.
constexpr std::array<std::pair<const char*, torch::ScalarType>, 10> kDtypes{{
    {"F64", torch::kFloat64},
    {"F32", torch::kFloat32},
    {"F16", torch::kFloat16},
    {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},
    {"I32", torch::kInt32},
    {"I16", torch::kInt16},
    {"I8", torch::kInt8},
    {"U8", torch::kUInt8},
    {"BOOL", torch::kBool},
}};

}  // namespace

std::optional<torch::ScalarType> dtype_from_safetensors_name(const std::string& name) {
  for (const auto& [text, dtype] : kDtypes) {
    if (name == text) return dtype;
  }
  return std::nullopt;
}

std::string safetensors_name_of(torch::ScalarType dtype) {
  for (const auto& [text, candidate] : kDtypes) {
    if (candidate == dtype) return text;
  }
  throw Error(fmt::format("dtype {} has no safetensors name; supported: {}", c10::toString(dtype),
                          supported_safetensors_dtypes()));
}

const std::string& supported_safetensors_dtypes() {
  static const std::string list = [] {
    std::string out;
    for (const auto& entry : kDtypes) {
      if (!out.empty()) out += ", ";
      out += entry.first;
    }
    return out;
  }();
  return list;
}

}  // namespace tune::io
