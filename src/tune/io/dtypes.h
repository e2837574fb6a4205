// The safetensors dtype names ("F32", "BF16", ...) and their LibTorch scalar types, shared by the reader,
// the writer and error messages so every message spells a dtype the way the file does.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

namespace tune::io {

// nullopt for a name safetensors defines but tune does not read (F8_*, U16, U32, U64, C64, ...) or an unknown one.
std::optional<torch::ScalarType> dtype_from_safetensors_name(const std::string& name);

// Throws tune::Error for a scalar type with no safetensors name we write (complex, quantized, ...).
std::string safetensors_name_of(torch::ScalarType dtype);

// The comma-separated list of supported names, for "expected one of ..." messages.
const std::string& supported_safetensors_dtypes();

}  // namespace tune::io
