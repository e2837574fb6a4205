// A recipe YAML with `include:` chains and key=value overrides (config::load, peek_recipe_name). The input is
// "recipe.yaml [SEP a.yaml [SEP b.yaml [SEP overrides, one per line]]]", SEP being kSeparator on a line of its own;
// the recipe may include a.yaml, b.yaml, itself, or the shipped presets (configs/). A plain recipe (the seeds) is
// a valid input. An accepted config must load again from its own to_yaml() to the same values (config.h).
#include <cstdio>
#include <cstdlib>

#include "fuzz_support.h"
#include "tune/config/config.h"

namespace {

using tune::config::KeySpec;
using tune::config::Schema;
using tune::config::ValueType;

constexpr std::string_view kSeparator = "\n#file#\n";

// A schema with every value type, named like the shipped recipes' keys so that the seeds mostly validate.
const Schema& schema() {
  static const Schema made = [] {
    Schema s;
    s.choice("recipe", {"sft", "latte"}, "sft", "");
    s.string("output_dir", "runs/fuzz", "");
    s.integer("seed", 0, "");
    s.boolean("gradient_checkpointing", true, "");
    s.choice("mixed_precision", {"bf16", "fp16", "no"}, "bf16", "");
    s.boolean("grad_inference", true, "");
    s.real("optimizer.lr", 3e-4, "");
    s.integer("training.batch_size", 8, "");
    s.integer("training.max_steps", 0, "");
    s.integer("eval.every", 0, "");
    s.integer("checkpoint.every", 0, "");
    s.integer("checkpoint.keep_last", 2, "");
    s.integer("generation.max_new_tokens", 16, "");
    s.integer("model.hidden_size", 128, "");
    s.integer("model.intermediate_size", 352, "");
    s.integer("model.num_hidden_layers", 4, "");
    s.integer("model.num_attention_heads", 4, "");
    s.integer("model.num_key_value_heads", 2, "");
    s.integer("model.max_position_embeddings", 256, "");
    s.required_weighted_paths("data.train", "");
    s.real("data.eval_fraction", 0.0, "");
    s.string("data.template", "plain", "");
    s.integer("data.max_length", 128, "");
    s.boolean("data.packing", false, "");
    s.path("tokenizer", "");
    s.optional_string("model.path", "");
    s.string_list("lora.target_modules", {"q_proj", "v_proj"}, "");
    s.add(KeySpec{"data.frames", ValueType::integer_list, "[16, 8]", false, {}, ""});
    return s;
  }();
  return made;
}

void check_round_trip(const tune::config::Config& config) {
  const auto resolved = tune::fuzz::write_file("resolved.yaml", config.to_yaml());
  tune::config::Config again;
  try {
    again = tune::config::load(resolved, {}, schema());
  } catch (const tune::Error& error) {
    std::fprintf(stderr, "to_yaml() wrote a config that does not load:\n%s\n%s\n", config.to_yaml().c_str(),
                 error.what());
    std::abort();
  }
  for (const auto& [key, entry] : config.entries) {
    const auto found = again.entries.find(key);
    if (found == again.entries.end() || found->second.yaml != entry.yaml) {
      std::fprintf(stderr, "key %s: '%s' does not load back from to_yaml() (got '%s')\n", key.c_str(),
                   entry.yaml.c_str(), found == again.entries.end() ? "nothing" : found->second.yaml.c_str());
      std::abort();
    }
  }
}

// Every getter of every set key, as recipes read them.
void read_all(const tune::config::Config& config) {
  for (const KeySpec& spec : schema().keys()) {
    if (!config.has(spec.key)) continue;
    (void)config.where(spec.key).to_string();
    switch (spec.type) {
      case ValueType::boolean: (void)config.get_bool(spec.key); break;
      case ValueType::integer: (void)config.get_int(spec.key); break;
      case ValueType::real: (void)config.get_real(spec.key); break;
      case ValueType::string:
      case ValueType::path: (void)config.get_string(spec.key); break;
      case ValueType::string_list: (void)config.get_strings(spec.key); break;
      case ValueType::integer_list: (void)config.get_ints(spec.key); break;
      case ValueType::weighted_paths: (void)config.get_weighted_paths(spec.key); break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = tune::fuzz::split(tune::fuzz::as_text(data, size), kSeparator);
  const auto recipe = tune::fuzz::write_file("recipe.yaml", parts[0]);
  tune::fuzz::write_file("a.yaml", parts.size() > 1 ? parts[1] : "");
  tune::fuzz::write_file("b.yaml", parts.size() > 2 ? parts[2] : "");
  std::vector<std::string> overrides;
  if (parts.size() > 3) {
    for (std::string_view line : tune::fuzz::split(parts[3], "\n")) overrides.emplace_back(line);
  }
  tune::fuzz::expect_input_errors([&] { (void)tune::config::peek_recipe_name(recipe, overrides); });
  tune::fuzz::expect_input_errors([&] {
    const auto config = tune::config::load(recipe, overrides, schema());
    read_all(config);
    check_round_trip(config);
  });
  return 0;
}
