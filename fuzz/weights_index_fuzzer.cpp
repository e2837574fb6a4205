// A sharded model directory's model.safetensors.index.json (weight_map: tensor -> shard file), read by
// WeightSource::open_directory beside two valid shards; also parse_byte_size, which reads checkpoint.max_shard_size.
#include <torch/torch.h>

#include "fuzz_support.h"
#include "tune/io/sharded_safetensors.h"
#include "tune/io/weights.h"

namespace {

// Shards named and filled as tests/fixtures/io/sharded's, so that its index (the seed) opens, and mutations of it
// reach the per-tensor checks rather than stopping at "shard does not exist".
const std::filesystem::path& model_dir() {
  static const std::filesystem::path dir = [] {
    const auto made = tune::fuzz::scratch_dir() / "sharded";
    std::filesystem::create_directories(made);
    tune::io::save_safetensors(made / "model-00001-of-00002.safetensors",
                               {{"0.weight", torch::ones({4, 3})}, {"0.bias", torch::zeros({4})}});
    tune::io::save_safetensors(made / "model-00002-of-00002.safetensors",
                               {{"1.weight", torch::ones({2, 4})}, {"1.bias", torch::zeros({2})}});
    return made;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = tune::fuzz::as_text(data, size);
  const auto& dir = model_dir();
  tune::fuzz::write_file("sharded/model.safetensors.index.json", text);
  tune::fuzz::expect_input_errors([&] {
    const auto source = tune::io::WeightSource::open_directory(dir);
    for (const std::string& name : source.names()) (void)source.load(name);
  });
  // A size such as "5GB": short inputs only, the config value it stands for is one word.
  if (size <= 64) (void)tune::io::parse_byte_size(std::string(text));
  return 0;
}
