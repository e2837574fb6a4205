// AutoencoderDC (DC-AE, Sana's VAE) against Hugging Face diffusers' AutoencoderDC:
// scripts/make_diffusers_dcae_fixture.py (run by CTest as dc_ae_fixture_setup into the build tree) saves two tiny
// seeded models with save_pretrained (one in shards) and diffusers' encode/decode/tiled-decode outputs; tune loads
// the directories by diffusers' names and must reproduce them. Without diffusers the fixture holds SKIPPED and the
// diffusers cases exit 77 (skipped).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/reference_fixture.h"
#include "tune/core/error.h"
#include "tune/core/memory_tracker.h"
#include "tune/io/safetensors.h"
#include "tune/models/dc_ae.h"

using namespace tune;

namespace {

std::filesystem::path fixture_dir() { return test::reference_fixture_dir("dc_ae_fixture"); }

struct Reference {
  models::AutoencoderDC model{nullptr};
  io::SafetensorsFile tensors;
};

Reference load_reference(const std::string& name) {
  test::skip_if_fixture_skipped(fixture_dir());
  return {models::load_autoencoder_dc(fixture_dir() / name),
          io::SafetensorsFile::open((fixture_dir() / (name + ".safetensors")).string())};
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// tune's fp32 output against diffusers' fp32 output: max |diff| <= 1e-5 (the outputs are O(1) to O(10)). No float64
// comparison: diffusers computes the linear attention and the RMSNorm statistics in fp32 even in a float64 model.
void check_against(const std::string& model_name, const std::string& what, const torch::Tensor& output,
                   Reference& reference) {
  const auto expected = reference.tensors.load(what);
  REQUIRE(output.sizes() == expected.sizes());
  const double diff = max_abs_diff(output, expected);
  std::printf("dc_ae %-9s %-14s max|ref| %.3g  fp32 max abs diff %.3g\n", model_name.c_str(), what.c_str(),
              expected.abs().max().item<double>(), diff);
  CHECK(diff <= 1e-5);
}

models::AutoencoderDCConfig parse(const std::string& text) {
  return models::AutoencoderDCConfig::from_json(nlohmann::json::parse(text), "vae/config.json");
}

// Efficient-Large-Model/Sana_600M_1024px_diffusers vae/config.json (mit-han-lab/dc-ae-f32c32-sana-1.0-diffusers).
std::string sana_vae_config_json() {
  return R"({
    "_class_name": "AutoencoderDC", "_diffusers_version": "0.32.0.dev0",
    "_name_or_path": "mit-han-lab/dc-ae-f32c32-sana-1.0-diffusers", "attention_head_dim": 32,
    "decoder_act_fns": "silu",
    "decoder_block_out_channels": [128, 256, 512, 512, 1024, 1024],
    "decoder_block_types": ["ResBlock", "ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock",
                            "EfficientViTBlock"],
    "decoder_layers_per_block": [3, 3, 3, 3, 3, 3], "decoder_norm_types": "rms_norm",
    "decoder_qkv_multiscales": [[], [], [], [5], [5], [5]], "downsample_block_type": "Conv",
    "encoder_block_out_channels": [128, 256, 512, 512, 1024, 1024],
    "encoder_block_types": ["ResBlock", "ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock",
                            "EfficientViTBlock"],
    "encoder_layers_per_block": [2, 2, 2, 3, 3, 3], "encoder_qkv_multiscales": [[], [], [], [5], [5], [5]],
    "in_channels": 3, "latent_channels": 32, "scaling_factor": 0.41407, "upsample_block_type": "interpolate"})";
}

// The message of the InputError a config raises; fails the test when it is accepted.
std::string refusal_of(const std::string& text) {
  try {
    parse(text);
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("config accepted: " << text);
  return {};
}

}  // namespace

TEST_CASE("AutoencoderDC encodes and decodes as diffusers' AutoencoderDC", "[dc_ae][diffusers]") {
  for (const std::string name : {"sana_like", "variant"}) {
    INFO("model " << name);
    auto reference = load_reference(name);
    auto& model = reference.model;
    // small_: the deepest stage has H*W <= head_dim tokens, where diffusers takes its quadratic attention branch.
    for (const std::string prefix : {"", "small_"}) {
      const auto image = reference.tensors.load(prefix + "image");
      const auto z = reference.tensors.load(prefix + "z");
      torch::NoGradGuard no_grad;
      check_against(name, prefix + "encoded", model->encode(image), reference);
      check_against(name, prefix + "decoded", model->decode_unscaled(z), reference);
    }
  }
}

TEST_CASE("AutoencoderDC scales latents by scaling_factor as diffusers' pipelines do", "[dc_ae][diffusers]") {
  auto reference = load_reference("sana_like");
  auto& model = reference.model;
  REQUIRE(model->config().scaling_factor == 0.41407);
  torch::NoGradGuard no_grad;
  // Sana trains on encode(x).latent * scaling_factor and decodes latents / scaling_factor.
  const auto encoded = reference.tensors.load("encoded");
  CHECK(max_abs_diff(model->encode_latents(reference.tensors.load("image")), encoded * 0.41407) <= 1e-5);
  const auto z = reference.tensors.load("z");
  CHECK(max_abs_diff(model->decode(z * 0.41407), reference.tensors.load("decoded")) <= 1e-5);
  // The frame helpers: [B, F, C, H, W], chunked; two frames of one video, one at a time.
  const auto frames = model->encode_frames(reference.tensors.load("image").unsqueeze(0), /*chunk_size=*/1);
  CHECK(frames.sizes() == torch::IntArrayRef({1, 2, 8, 8, 6}));
  CHECK(max_abs_diff(frames[0], encoded * 0.41407) <= 1e-5);
  const auto images = model->decode_frames((z * 0.41407).unsqueeze(0), /*chunk_size=*/1);
  CHECK(max_abs_diff(images[0], reference.tensors.load("decoded")) <= 1e-5);
}

TEST_CASE("AutoencoderDC's tiled encode and decode match diffusers' enable_tiling()", "[dc_ae][diffusers]") {
  auto reference = load_reference("sana_like");
  auto& model = reference.model;
  // 16-pixel tiles every 12 pixels: 4x4 latent tiles every 3 latents, a 4-pixel (1-latent) blend, and edge tiles of
  // 1 latent row (4 pixels).
  model->set_tiling({/*enabled=*/true, 16, 16, 12, 12});
  const auto z = reference.tensors.load("tile_z");
  const auto image = reference.tensors.load("tile_image");
  torch::NoGradGuard no_grad;
  const auto tiled_decoded = model->decode_unscaled(z);
  const auto tiled_encoded = model->encode(image);
  check_against("sana_like", "tiled_decoded", tiled_decoded, reference);
  check_against("sana_like", "tiled_encoded", tiled_encoded, reference);
  // The tiles did change the results (attention and convolutions see one tile): the tiled paths were taken.
  model->set_tiling({});
  CHECK(max_abs_diff(model->decode_unscaled(z), tiled_decoded) > 1e-3);
  CHECK(max_abs_diff(model->encode(image), tiled_encoded) > 1e-3);
  CHECK_THROWS_AS(model->set_tiling({true, 16, 16, 13, 12}), std::invalid_argument);  // stride not a multiple of 4
}

TEST_CASE("AutoencoderDCConfig reads the published Sana VAE config", "[dc_ae]") {
  const auto config = parse(sana_vae_config_json());
  CHECK(config.spatial_compression_ratio() == 32);
  CHECK(config.decoder_norm_types == std::vector<std::string>(6, "rms_norm"));
  CHECK(config.decoder_act_fns == std::vector<std::string>(6, "silu"));
  CHECK(config.encoder_qkv_multiscales[3] == std::vector<int64_t>{5});
  CHECK(config.encoder_out_shortcut);
  CHECK(config.decoder_conv_act_fn == "relu");
  // 312.3 M parameters (1.25 GB in fp32, the published file's size).
  models::AutoencoderDC model(config);
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  CHECK(count == Approx(312.3e6).epsilon(0.001));
}

TEST_CASE("AutoencoderDCConfig refuses what tune does not implement, by file and field", "[dc_ae]") {
  const std::string base = R"("_class_name": "AutoencoderDC", "encoder_block_out_channels": [8, 16],
    "decoder_block_out_channels": [8, 16], "encoder_layers_per_block": [1, 1], "decoder_layers_per_block": [1, 1],
    "encoder_qkv_multiscales": [[], [5]], "decoder_qkv_multiscales": [[], [5]], "latent_channels": 4,
    "attention_head_dim": 8)";
  CHECK_NOTHROW(parse("{" + base + "}"));
  struct Refused {
    std::string field, json, says;
  };
  for (const auto& c : std::vector<Refused>{
           {"decoder_norm_types", R"("decoder_norm_types": "batch_norm")", "\"rms_norm\""},
           {"upsample_block_type", R"("upsample_block_type": "bilinear")", "\"interpolate\""},
           {"downsample_block_type", R"("downsample_block_type": "avgpool")", "\"Conv\""},
           {"decoder_act_fns", R"("decoder_act_fns": ["silu", "relu6"])", "\"mish\""},
           {"decoder_conv_act_fn", R"("decoder_conv_act_fn": "tanh")", "\"relu\""},
           {"encoder_block_types", R"("encoder_block_types": ["ResBlock", "Attention"])", "\"EfficientViTBlock\""},
           {"decoder_layers_per_block", R"("decoder_layers_per_block": [0, 1])", "only positive block counts"},
           {"encoder_layers_per_block", R"("encoder_layers_per_block": [1, 1, 1])", "2 block counts"},
           {"encoder_qkv_multiscales", R"("encoder_qkv_multiscales": [[], [4]])", "odd"},
           {"decoder_block_types", R"("decoder_block_types": ["ResBlock"])", "stages"},
           {"scaling_factor", R"("scaling_factor": 0)", "positive"},
           {"_class_name", R"("_class_name": "AutoencoderKL")", "AutoencoderDC"},
       }) {
    INFO(c.json);
    std::string text = "{" + base + ", " + c.json + "}";
    if (c.field == "_class_name") text = "{" + c.json + "}";
    const std::string message = refusal_of(text);
    CHECK(message.find("vae/config.json") != std::string::npos);
    CHECK(message.find("'" + c.field + "'") != std::string::npos);
    CHECK(message.find(c.says) != std::string::npos);
  }
}

// Not a test: the memory of decoding with the real Sana DC-AE config (random weights initialised here), on the CPU
// with tune's tracking allocator: weights, and the peak of live tensor storage above them during one decode of
// [1, 32, S/32, S/32] latents, untiled and with diffusers' default tiles (512 pixels every 448).
//   TUNE_DC_AE_SIZE=1024 TUNE_DC_AE_DTYPE=bf16 TUNE_DC_AE_TILED=1 build/tests/models/test_dc_ae "[.memory]"
TEST_CASE("AutoencoderDC decode memory, real Sana config", "[.memory]") {
  memory_tracker::install();
  const char* size_text = std::getenv("TUNE_DC_AE_SIZE");
  const char* dtype_text = std::getenv("TUNE_DC_AE_DTYPE");
  const int64_t size = size_text ? std::atoll(size_text) : 1024;
  const bool bf16 = dtype_text && std::string(dtype_text) == "bf16";
  torch::NoGradGuard no_grad;
  const int64_t before_weights = memory_tracker::cpu_live_bytes();
  models::AutoencoderDC model(parse(sana_vae_config_json()));
  model->to(bf16 ? torch::kBFloat16 : torch::kFloat32);
  model->eval();
  const int64_t weights = memory_tracker::cpu_live_bytes() - before_weights;
  const auto latents = torch::randn({1, 32, size / 32, size / 32}).to(bf16 ? torch::kBFloat16 : torch::kFloat32);
  // TUNE_DC_AE_TILED: "0" untiled only, "1" tiled only, otherwise both.
  const char* tiled_text = std::getenv("TUNE_DC_AE_TILED");
  std::vector<bool> modes{false, true};
  if (tiled_text && std::string(tiled_text) == "0") modes = {false};
  if (tiled_text && std::string(tiled_text) == "1") modes = {true};
  for (const bool tiled : modes) {
    model->set_tiling({tiled, 512, 512, 448, 448});
    const int64_t live = memory_tracker::cpu_live_bytes();
    memory_tracker::reset_cpu_peak();
    const auto start = std::chrono::steady_clock::now();
    const auto images = model->decode_unscaled(latents);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t peak = memory_tracker::cpu_peak_bytes() - live;
    std::printf("dc_ae decode %lldx%lld %s %-7s weights %.0f MiB, peak above weights and input %.0f MiB, output "
                "%.0f MiB, %.1f s\n", static_cast<long long>(images.size(2)), static_cast<long long>(images.size(3)),
                bf16 ? "bf16" : "fp32", tiled ? "tiled" : "untiled", weights / 1048576.0, peak / 1048576.0,
                images.numel() * images.element_size() / 1048576.0, seconds);
    std::fflush(stdout);  // a long run's lines appear as they come, also when stdout is a file
    CHECK(images.sizes() == torch::IntArrayRef({1, 3, size, size}));
    CHECK(torch::isfinite(images).all().item<bool>());
  }
}
