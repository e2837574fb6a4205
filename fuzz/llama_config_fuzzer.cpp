// A Llama-family model's config.json (LlamaConfig::from_json) and the generation_config.json beside it. A config
// that is accepted must also survive its own round trip, as llama_config.h promises: from_json(to_json()) equals it.
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "tune/models/generation_config.h"
#include "tune/models/llama_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = tune::fuzz::as_text(data, size);
  // Parsed as io::read_json_file parses a file (a parse error there is an InputError naming the file).
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_discarded()) {
    tune::fuzz::expect_input_errors([&] {
      const auto config = tune::models::LlamaConfig::from_json(json, "config.json");
      for (int64_t layer = 0; layer < config.num_hidden_layers && layer < 64; ++layer) {
        (void)config.layer_sliding_window(layer);
      }
      const auto again = tune::models::LlamaConfig::from_json(config.to_json(), "round trip");
      if (!(again == config)) {
        std::fprintf(stderr, "from_json(to_json()) differs from the config read:\n%s\n%s\n",
                     config.to_json().dump().c_str(), again.to_json().dump().c_str());
        std::abort();
      }
    });
  }
  tune::fuzz::write_file("generation_config.json", text);
  tune::fuzz::expect_input_errors([&] { (void)tune::models::generation_config_eos_ids(tune::fuzz::scratch_dir()); });
  return 0;
}
