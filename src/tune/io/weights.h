// Hugging Face weight directories: model.safetensors, or model-0000x-of-0000y.safetensors shards listed in
// model.safetensors.index.json (also diffusion_pytorch_model.safetensors for diffusers models).
#pragma once

#include <torch/nn/module.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tune/io/safetensors.h"

namespace tune::io {

// A set of safetensors files seen as one name -> tensor map.
class WeightSource {
 public:
  // `dir` holds `index_name` (sharded) or `single_name`; throws InputError naming the directory otherwise,
  // or naming the index/shard when the index lists a missing shard or a tensor a shard lacks.
  static WeightSource open_directory(const std::filesystem::path& dir,
                                     const std::string& single_name = "model.safetensors",
                                     const std::string& index_name = "model.safetensors.index.json");
  static WeightSource open_file(const std::filesystem::path& file);

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;  // throws InputError if absent
  torch::Tensor load(const std::string& name) const;
  // The directory or file this source was opened from, for error messages about the set as a whole.
  const std::filesystem::path& origin() const { return origin_; }

 private:
  std::filesystem::path origin_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> index_;  // tensor name -> position in files_
};

struct LoadOptions {
  std::string prefix;                             // prepended to module names to get file names (PEFT: "base_model.model.")
  std::vector<std::string> ignore_missing_containing;   // module params whose name contains one of these may be absent (e.g. "lora_")
  std::vector<std::string> ignore_unexpected_containing;  // file tensors containing these are skipped (e.g. "rotary_emb.inv_freq")
  bool allow_unexpected = false;                  // otherwise a tensor in the file with no parameter is an error
};

// Corrupted weights would otherwise show only as "step 1: loss is nan": throws InputError naming `file` and the
// tensor `name` when a floating `tensor` holds NaN or infinity (one min/max pass; other dtypes pass).
void require_finite(const torch::Tensor& tensor, const std::filesystem::path& file, const std::string& name);

// Copies tensors into the module's parameters and buffers by name (no_grad), converting dtype (F16/BF16/F32)
// to the parameter's. Errors (InputError) name the file and tensor: missing tensor, shape mismatch,
// non-floating dtype for a floating parameter, unexpected tensor, and a floating tensor holding NaN or infinity
// (checked as it is copied). Returns the number of tensors loaded.
// Streams: one tensor at a time, read straight into a contiguous CPU parameter of the file's dtype (no temporary),
// otherwise through one temporary in the file's dtype, so loading needs the module's memory plus at most one tensor.
size_t load_into_module(torch::nn::Module& module, const WeightSource& source, const LoadOptions& options = {});

}  // namespace tune::io
