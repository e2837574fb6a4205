// LoRA adapters both ways between tune and PEFT, on scripts/make_hf_fixtures.py's llama_gqa and qwen3 bases: an adapter
// PEFT saved, loaded by tune, and an adapter tune's checkpoint writer saved (what `tune export` hands out),
// loaded by PEFT through scripts/peft_logits.py. Each side's logits must equal the other's.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "hf_fixture.h"
#include "tune/data/tokenizer.h"
#include "tune/io/safetensors.h"
#include "tune/recipes/sft/peft_config.h"
#include "tune/recipes/sft/sft_checkpoint.h"

using namespace tune;
using tune::test::hf_fixture_dir;
using tune::test::load_hf_model;
using tune::test::max_abs_diff;

namespace {

// Base models of scripts/make_hf_fixtures.py that have a PEFT adapter (<base>_adapter): Qwen3's LoRA on q/k/v/o
// sits beside its query/key norms.
const char* const kBases[] = {"llama_gqa", "qwen3"};

}  // namespace

TEST_CASE("a PEFT adapter loaded by tune gives PEFT's logits within 1e-5", "[models][hf][lora]") {
  torch::NoGradGuard no_grad;
  for (const std::string base : kBases) {
    INFO("base " << base);
    const auto adapter_dir = hf_fixture_dir(base + "_adapter");
    const auto lora = recipes::sft::lora_from_peft_config(adapter_dir / "adapter_config.json");
    CHECK(lora.lora.rank == 4);
    CHECK(lora.lora.alpha == 8.0);
    CHECK(lora.target_modules.size() == 4);
    auto model = load_hf_model(hf_fixture_dir(base), lora);
    recipes::sft::load_checkpoint_weights(adapter_dir, model);

    const auto reference = io::SafetensorsFile::open(adapter_dir / "reference.safetensors");
    const double difference = max_abs_diff(model->forward(reference.load("input_ids")), reference.load("logits"));
    UNSCOPED_INFO(base << ": max |tune - PEFT| logits, PEFT's adapter = " << difference);
    CHECK(difference < 1e-5);
  }
}

TEST_CASE("an adapter written by tune gives PEFT tune's logits within 1e-5", "[models][hf][lora]") {
  torch::NoGradGuard no_grad;
  for (const std::string base : kBases) {
    INFO("base " << base);
    const auto base_dir = hf_fixture_dir(base);
    models::LlamaLoraOptions lora;
    lora.lora.rank = 4;
    lora.lora.alpha = 8.0;
    lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
    auto model = load_hf_model(base_dir, lora);
    // lora_B starts at zero, which would make any adapter file give the base model's logits.
    torch::manual_seed(7);
    for (auto& item : model->named_parameters()) {
      if (item.key().find("lora_") != std::string::npos) {
        item.value().normal_(0.0, 1.0 / std::sqrt(static_cast<double>(item.value().size(1))));
      }
    }
    const auto reference = io::SafetensorsFile::open(base_dir / "reference.safetensors");
    const auto input_ids = reference.load("input_ids");
    const auto logits = model->forward(input_ids);
    REQUIRE(max_abs_diff(logits, reference.load("logits")) > 0.1);  // the adapter matters

    const auto adapter_dir = hf_fixture_dir("tune_adapter_" + base);
    const auto peft_logits_path = hf_fixture_dir("tune_adapter_" + base + "_peft_logits.safetensors");
    std::filesystem::remove_all(adapter_dir);
    const auto tokenizer = data::Tokenizer::load(std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/data/tiny.model");
    recipes::sft::write_checkpoint(adapter_dir, model, tokenizer, base_dir.string(), nullptr, {});

    const auto command = fmt::format("'{}' '{}/scripts/peft_logits.py' '{}' '{}' '{}' '{}'", TUNE_PYTHON,
                                     TUNE_SOURCE_DIR, base_dir.string(), adapter_dir.string(),
                                     (base_dir / "reference.safetensors").string(), peft_logits_path.string());
    REQUIRE(std::system(command.c_str()) == 0);
    const double difference = max_abs_diff(logits, io::SafetensorsFile::open(peft_logits_path).load("logits"));
    UNSCOPED_INFO(base << ": max |tune - PEFT| logits, tune's adapter = " << difference);
    CHECK(difference < 1e-5);
  }
}
