// A diffusers pipeline directory's model_index.json: which component (transformer, vae, text_encoder, tokenizer,
// scheduler, ...) is which class from which library, each in the sub-directory of its name. Reading only: which
// classes tune can build is the caller's concern (require's accepted_classes).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tune::io {

struct PipelineComponent {
  std::string name;                 // the key in model_index.json, e.g. "transformer"
  std::string library;              // "diffusers", "transformers", or a custom module's name
  std::string class_name;           // e.g. "LatteTransformer3DModel"
  std::filesystem::path directory;  // pipeline_dir / name
};

struct PipelineIndex {
  std::filesystem::path file;  // .../model_index.json, for messages
  std::string class_name;      // _class_name, e.g. "LattePipeline"
  std::string diffusers_version;  // _diffusers_version, "" when absent
  // Components present in the pipeline; entries written [null, null] (e.g. an unused safety_checker) are absent.
  std::map<std::string, PipelineComponent> components;

  bool has(const std::string& name) const { return components.count(name) > 0; }
  // The component `name`, whose class must be one of accepted_classes (empty: any class). Throws tune::InputError
  // naming the file and the key when the component is absent or its class is not accepted (listing the accepted).
  const PipelineComponent& require(const std::string& name, const std::vector<std::string>& accepted_classes) const;
};

// Reads pipeline_dir/model_index.json. Keys starting with "_" are metadata; a value [library, class] (strings, or
// both null) is a component; other values (e.g. "requires_safety_checker": true) are the pipeline's own
// settings and are skipped. Throws tune::InputError naming the file (and key): missing or malformed file, no
// "_class_name", a component entry that is not [string, string] or [null, null], a component whose directory
// is missing.
PipelineIndex read_pipeline_index(const std::filesystem::path& pipeline_dir);

// True when dir holds a model_index.json (a diffusers pipeline rather than one model's directory).
bool is_pipeline_directory(const std::filesystem::path& dir);

}  // namespace tune::io
