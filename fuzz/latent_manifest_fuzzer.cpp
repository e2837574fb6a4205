// The video recipes' latents.json, the manifest `tune prepare` writes beside the latents and training reads back
// (read_latent_manifest). An accepted manifest must survive the write/read round trip.
#include <cstdio>
#include <cstdlib>

#include "fuzz_support.h"
#include "tune/recipes/diffusion/latent_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace latte = tune::recipes::diffusion_common;
  const auto dir = tune::fuzz::scratch_dir() / "latents";
  std::filesystem::create_directories(dir);
  tune::fuzz::write_file(std::string("latents/") + latte::kLatentManifestName, tune::fuzz::as_text(data, size));
  tune::fuzz::expect_input_errors([&] {
    const latte::LatentManifest manifest = latte::read_latent_manifest(dir);
    latte::write_latent_manifest(dir, manifest);
    const latte::LatentManifest again = latte::read_latent_manifest(dir);
    if (!latte::same_preparation(manifest, again) || again.videos != manifest.videos ||
        again.complete != manifest.complete || again.vae != manifest.vae) {
      std::fprintf(stderr, "latents.json changed in a write/read round trip\n");
      std::abort();
    }
  });
  return 0;
}
