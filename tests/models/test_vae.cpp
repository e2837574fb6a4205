// AutoencoderKL against scripts/make_vae_fixture.py's independent float64 reference: encoder moments, decoder
// output, diffusers parameter names, legacy attention names, config errors, and chunked video encode/decode.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <set>
#include <string>

#include "common/scratch_dir.h"
#include "tune/core/error.h"
#include "tune/io/safetensors.h"
#include "tune/models/vae.h"

using Catch::Contains;
using namespace tune;

namespace {

std::filesystem::path vae_fixture_dir() { return std::filesystem::path(TUNE_SOURCE_DIR) / "tests/fixtures/vae"; }

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("expected tune::InputError");
  return "";
}

struct VaeFixture {
  models::AutoencoderKL model{nullptr};
  io::SafetensorsFile io;
};

VaeFixture load_fixture() {
  return {models::load_autoencoder_kl(vae_fixture_dir()),
          io::SafetensorsFile::open(vae_fixture_dir() / "io.safetensors")};
}

}  // namespace

TEST_CASE("AutoencoderKL encoder moments and decoder output match the float64 reference", "[models][vae]") {
  torch::NoGradGuard no_grad;
  auto fixture = load_fixture();
  auto& vae = fixture.model;
  const auto images = fixture.io.load("images");

  const models::LatentDistribution posterior = vae->encode(images);
  const double mean_diff = max_abs_diff(posterior.mean, fixture.io.load("encoder_mean"));
  const double logvar_diff = max_abs_diff(posterior.logvar, fixture.io.load("encoder_logvar"));
  UNSCOPED_INFO("max |mean - reference| = " << mean_diff << ", max |logvar - reference| = " << logvar_diff);
  CHECK(mean_diff < 1e-4);
  CHECK(logvar_diff < 1e-4);
  // The fixture pushes one log-variance channel past the upper clamp: it must read exactly 20.
  CHECK(posterior.logvar.select(1, 3).eq(20.0f).all().item<bool>());

  // decode() takes scaled latents; the reference is decoder(post_quant_conv(latents / scaling_factor)).
  const auto latents = fixture.io.load("latents");
  const auto decoded = vae->decode(latents);
  const double decoded_diff = max_abs_diff(decoded, fixture.io.load("decoded"));
  UNSCOPED_INFO("max |decoded - reference| = " << decoded_diff);
  CHECK(decoded_diff < 1e-4);
  CHECK(max_abs_diff(vae->decode_unscaled(latents / 0.18215), decoded) < 1e-5);

  // The scaled mean is the unscaled mean times scaling_factor; samples centre on it with the posterior's spread.
  CHECK(vae->config().scaling_factor == Approx(0.18215));
  const auto scaled_mean = vae->encode_latents(images, models::LatentSampling::kMean);
  CHECK(max_abs_diff(scaled_mean, posterior.mean * 0.18215) < 1e-6);
  auto generator = at::detail::createCPUGenerator(7);
  const auto noise_expected = torch::randn(posterior.mean.sizes(), at::detail::createCPUGenerator(7));
  const auto sampled = vae->encode_latents(images, models::LatentSampling::kSample, generator);
  CHECK(max_abs_diff(sampled, (posterior.mean + posterior.std() * noise_expected) * 0.18215) < 1e-4);
}

TEST_CASE("AutoencoderKL parameter names are exactly the fixture's diffusers tensor names", "[models][vae]") {
  const auto config = models::AutoencoderKLConfig::from_file((vae_fixture_dir() / "config.json").string());
  models::AutoencoderKL vae(config);
  std::set<std::string> model_names, file_names;
  for (const auto& item : vae->named_parameters()) model_names.insert(item.key());
  const auto weights = io::SafetensorsFile::open(vae_fixture_dir() / "diffusion_pytorch_model.safetensors");
  for (const auto& entry : weights.entries()) file_names.insert(entry.first);
  CHECK(model_names == file_names);
  CHECK(vae->named_buffers().size() == 0);
  // Spot checks of the naming scheme the task spells out.
  for (const char* name : {"encoder.down_blocks.0.downsamplers.0.conv.weight", "encoder.down_blocks.1.resnets.0.conv_shortcut.weight",
                           "encoder.mid_block.attentions.0.to_out.0.weight", "decoder.up_blocks.0.upsamplers.0.conv.bias",
                           "decoder.up_blocks.1.resnets.1.norm2.weight", "quant_conv.weight", "post_quant_conv.bias"}) {
    INFO(name);
    CHECK(model_names.count(name) == 1);
  }
  CHECK(model_names.count("decoder.up_blocks.1.upsamplers.0.conv.weight") == 0);  // the last block does not upsample
}

TEST_CASE("AutoencoderKL loads checkpoints with legacy attention names (query/key/value/proj_attn)", "[models][vae]") {
  torch::NoGradGuard no_grad;
  testing::ScratchDir dir;
  std::filesystem::copy_file(vae_fixture_dir() / "config.json", dir / "config.json");
  const auto modern = io::SafetensorsFile::open(vae_fixture_dir() / "diffusion_pytorch_model.safetensors");
  std::vector<std::pair<std::string, torch::Tensor>> renamed;
  int legacy_count = 0;
  for (const auto& entry : modern.entries()) {
    const std::string old_name = models::legacy_attention_name(entry.first);
    torch::Tensor tensor = modern.load(entry.first);
    // Some old conversions kept the projections as 1x1 convs: exercise that shape on the decoder's query.
    if (old_name == "decoder.mid_block.attentions.0.query.weight") tensor = tensor.unsqueeze(-1).unsqueeze(-1);
    renamed.emplace_back(old_name.empty() ? entry.first : old_name, tensor);
    legacy_count += old_name.empty() ? 0 : 1;
  }
  REQUIRE(legacy_count == 16);  // 2 mid blocks x 4 projections x (weight, bias)
  io::save_safetensors(dir / "diffusion_pytorch_model.safetensors", renamed);

  auto legacy = models::load_autoencoder_kl(dir.path());
  auto reference = load_fixture();
  const auto parameters = reference.model->named_parameters();
  for (const auto& item : legacy->named_parameters()) {
    INFO(item.key());
    CHECK(torch::equal(item.value(), parameters[item.key()]));
  }
  CHECK(max_abs_diff(legacy->decode(reference.io.load("latents")), reference.io.load("decoded")) < 1e-4);

  // A legacy tensor of the wrong shape is reported under both names.
  for (auto& [name, tensor] : renamed) {
    if (name == "encoder.mid_block.attentions.0.key.weight") tensor = torch::zeros({16, 8});
  }
  io::save_safetensors(dir / "diffusion_pytorch_model.safetensors", renamed);
  const std::string message = error_message([&] { models::load_autoencoder_kl(dir.path()); });
  CHECK_THAT(message, Contains("encoder.mid_block.attentions.0.key.weight") &&
                          Contains("encoder.mid_block.attentions.0.to_k.weight") && Contains("[16, 8]"));
}

TEST_CASE("AutoencoderKL config errors name config.json and the field", "[models][vae]") {
  testing::ScratchDir dir;
  const auto original = nlohmann::json::parse(testing::read_text(vae_fixture_dir() / "config.json"));

  auto message_for = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config = original;
    edit(config);
    testing::write_text(dir / "config.json", config.dump(2));
    return error_message([&] { models::AutoencoderKLConfig::from_file((dir / "config.json").string()); });
  };

  const std::string bad_type = message_for([](nlohmann::json& c) { c["down_block_types"][1] = "AttnDownEncoderBlock2D"; });
  CHECK_THAT(bad_type, Contains("config.json") && Contains("down_block_types") && Contains("AttnDownEncoderBlock2D") &&
                           Contains("DownEncoderBlock2D"));
  // Through the directory loader too, before any weights are read.
  std::filesystem::copy_file(vae_fixture_dir() / "diffusion_pytorch_model.safetensors",
                             dir / "diffusion_pytorch_model.safetensors");
  CHECK_THAT(error_message([&] { models::load_autoencoder_kl(dir.path()); }),
             Contains("config.json") && Contains("down_block_types"));

  CHECK_THAT(message_for([](nlohmann::json& c) { c["up_block_types"][0] = "AttnUpDecoderBlock2D"; }),
             Contains("config.json") && Contains("up_block_types") && Contains("AttnUpDecoderBlock2D"));
  CHECK_THAT(message_for([](nlohmann::json& c) { c["up_block_types"] = {"UpDecoderBlock2D"}; }),
             Contains("up_block_types") && Contains("block_out_channels"));
  CHECK_THAT(message_for([](nlohmann::json& c) { c["act_fn"] = "gelu"; }), Contains("act_fn") && Contains("gelu"));
  CHECK_THAT(message_for([](nlohmann::json& c) { c["norm_num_groups"] = 3; }),
             Contains("norm_num_groups") && Contains("[8, 16]"));
  CHECK_THAT(message_for([](nlohmann::json& c) { c["latent_channels"] = "4"; }), Contains("latent_channels"));

  // Accepted and defaulted fields: force_upcast, use_(post_)quant_conv, a null shift_factor.
  nlohmann::json config = original;
  config["force_upcast"] = false;
  config["shift_factor"] = nullptr;
  config["use_quant_conv"] = false;
  const auto parsed = models::AutoencoderKLConfig::from_json(config, "config.json");
  CHECK_FALSE(parsed.use_quant_conv);
  CHECK(parsed.use_post_quant_conv);
  CHECK(parsed.shift_factor == 0.0);
  CHECK(parsed.downscale_factor() == 2);
  models::AutoencoderKL without_quant(parsed);
  CHECK(without_quant->named_parameters().find("quant_conv.weight") == nullptr);
  const auto round_trip = models::AutoencoderKLConfig::from_json(parsed.to_json(), "round trip");
  CHECK(round_trip.to_json() == parsed.to_json());
}

TEST_CASE("AutoencoderKL chunked frame encode/decode equals the whole-batch result", "[models][vae]") {
  auto fixture = load_fixture();
  auto& vae = fixture.model;
  const auto images = fixture.io.load("images");  // [2, 3, 16, 16]
  // [B=2, F=3, 3, 16, 16]: six distinct frames, so a chunk of 4 splits both the batch and a video.
  const auto frames = torch::stack({torch::stack({images[0], images[1], images[0].flip(-1)}),
                                    torch::stack({images[1].flip(-2), images[0].neg(), images[1]})});
  const auto flat = frames.reshape({6, 3, 16, 16});

  torch::Tensor whole_batch;
  {
    torch::NoGradGuard no_grad;
    whole_batch = vae->encode_latents(flat, models::LatentSampling::kMean).reshape({2, 3, 4, 8, 8});
  }
  const auto chunked = vae->encode_frames(frames, /*chunk_size=*/4, models::LatentSampling::kMean);
  CHECK_FALSE(chunked.requires_grad());
  REQUIRE(chunked.sizes() == whole_batch.sizes());
  CHECK(max_abs_diff(chunked, whole_batch) < 1e-5);
  CHECK(max_abs_diff(vae->encode_frames(frames, 1, models::LatentSampling::kMean), whole_batch) < 1e-5);

  // Sampling draws all frames' noise at once, so the chunk size does not change the result.
  const auto sampled_whole = vae->encode_frames(frames, 6, models::LatentSampling::kSample, at::detail::createCPUGenerator(3));
  const auto sampled_chunked = vae->encode_frames(frames, 4, models::LatentSampling::kSample, at::detail::createCPUGenerator(3));
  CHECK(max_abs_diff(sampled_whole, sampled_chunked) < 1e-5);
  CHECK(max_abs_diff(sampled_whole, whole_batch) > 1e-2);  // it did sample

  const auto decoded_chunked = vae->decode_frames(chunked, 4);
  REQUIRE(decoded_chunked.sizes() == frames.sizes());
  torch::NoGradGuard no_grad;
  const auto decoded_whole = vae->decode(whole_batch.reshape({6, 4, 8, 8})).reshape({2, 3, 3, 16, 16});
  CHECK(max_abs_diff(decoded_chunked, decoded_whole) < 1e-5);

  CHECK_THROWS_AS(vae->encode_frames(flat, 2), std::invalid_argument);      // not 5-D
  CHECK_THROWS_AS(vae->encode_frames(frames, 0), std::invalid_argument);    // chunk_size must be positive
}
