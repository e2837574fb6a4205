// Image samples as `tune infer --out` writes them: .png through the image writer (read back by Pillow too),
// .safetensors holding the decoded image and the extra tensors, numbered names, and refused extensions.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "tune/core/error.h"
#include "tune/data/image_writer.h"
#include "tune/data/video_reader.h"
#include "tune/io/safetensors.h"
#include "tune/recipes/diffusion/sample_files.h"

using namespace tune;
using namespace tune::recipes::diffusion_common;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::path(TUNE_BINARY_DIR) / "test_sample_files_scratch" / (std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("image samples: .safetensors holds the image as float32 and the extra tensors", "[sample_files]") {
  const auto dir = fresh_dir("safetensors");
  const auto image = torch::rand({3, 5, 7}, torch::kDouble) * 2 - 1;
  const auto latents = torch::randn({1, 32, 2, 3});
  const auto path = dir / "nested" / "sample.safetensors";
  write_image_sample(path, image, {{"latents", latents}});
  const auto file = io::SafetensorsFile::open(path);
  const auto stored = file.load("image");
  CHECK(stored.scalar_type() == torch::kFloat32);
  CHECK(torch::equal(stored, image.to(torch::kFloat32)));
  CHECK(torch::equal(file.load("latents"), latents));
}

TEST_CASE("image samples: .png and .jpg are encoded with the frames' rounding", "[sample_files]") {
  if (!data::video_support_available()) {
    WARN("tune was built without FFmpeg: image sample test skipped");
    return;
  }
  const auto dir = fresh_dir("encoded");
  const auto image = torch::rand({3, 9, 11}) * 2 - 1;
  const auto expected = ((image + 1) * 127.5).round().clamp(0, 255).to(torch::kUInt8).permute({1, 2, 0});
  const auto png = numbered_path(dir / "out.png", 1, 2);
  CHECK(png == dir / "out-1.png");
  write_image_sample(png, image);
  CHECK(torch::equal(data::read_image(png), expected));
  // Pillow's view of the same file (scripts/image_reference.py), when installed.
  const auto raw = dir / "pillow.raw";
  const std::string command = std::string(TUNE_PYTHON) + " '" + TUNE_SOURCE_DIR + "/scripts/image_reference.py' decode '" +
                              png.string() + "' '" + raw.string() + "' > /dev/null";
  const int status = std::system(command.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
    WARN("Pillow is not installed: reference check skipped");
  } else {
    REQUIRE(status == 0);
    std::ifstream in(raw, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() == 9 * 11 * 3);
    CHECK(torch::equal(torch::from_blob(bytes.data(), {9, 11, 3}, torch::kUInt8), expected));
  }
  write_image_sample(dir / "out.jpg", image);
  CHECK(data::read_image(dir / "out.jpg").sizes() == expected.sizes());
}

TEST_CASE("image samples: an unknown extension or a wrong shape is refused before anything is created",
          "[sample_files]") {
  const auto dir = fresh_dir("refused");
  const auto image = torch::zeros({3, 4, 4});
  CHECK_THROWS_AS(write_image_sample(dir / "out.gif", image), UsageError);
  CHECK_THROWS_WITH(write_image_sample(dir / "out.gif", image),
                    Contains((dir / "out.gif").string()) && Contains("'.gif'") && Contains(".png .jpg .jpeg") &&
                        Contains(".safetensors"));
  CHECK_THROWS_WITH(write_image_sample(dir / "out.png", torch::zeros({1, 3, 4, 4})),
                    Contains((dir / "out.png").string()) && Contains("[3, H, W]") && Contains("[1, 3, 4, 4]"));
  CHECK(!fs::exists(dir));
}
