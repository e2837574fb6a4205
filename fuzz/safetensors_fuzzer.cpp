// A safetensors file (8-byte header size, JSON header, data) as a downloaded model or a checkpoint gives it:
// SafetensorsFile::open validates the header, then every tensor it lists is read back.
#include "fuzz_support.h"
#include "tune/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = tune::fuzz::write_file("model.safetensors", tune::fuzz::as_text(data, size));
  tune::fuzz::expect_input_errors([&] {
    const auto file = tune::io::SafetensorsFile::open(path);
    // open() promised that every entry lies inside the file with the size its dtype and shape need: load() must
    // then neither fail nor read outside the data section.
    for (const auto& [name, entry] : file.entries()) {
      const torch::Tensor tensor = file.load(name);
      if (tensor.numel() > 0) (void)tensor.sum().item<double>();
    }
  });
  return 0;
}
