// PEFT adapter_config.json as tune reads it: what it implements loads; every field that would change the adapter's
// output in a way tune does not implement is refused by name (values as peft's LoraConfig writes them).
#include <catch2/catch.hpp>

#include "../common/scratch_dir.h"
#include "tune/core/error.h"
#include "tune/io/json_file.h"
#include "tune/recipes/sft/peft_config.h"

using tune::recipes::sft::lora_from_peft_config;
using tune::recipes::sft::peft_adapter_config;

namespace {

nlohmann::json plain_adapter() {
  tune::models::LlamaLoraOptions lora;
  lora.lora.rank = 8;
  lora.lora.alpha = 16;
  lora.target_modules = {"q_proj", "v_proj"};
  return peft_adapter_config(lora, "base");
}

std::string error_of(const tune::testing::ScratchDir& dir, const nlohmann::json& config) {
  tune::io::write_json_file(dir.path() / "adapter_config.json", config);
  try {
    lora_from_peft_config(dir.path() / "adapter_config.json");
  } catch (const tune::InputError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a PEFT LoRA config round-trips and all-linear names the seven projections", "[recipes][peft]") {
  tune::testing::ScratchDir dir;
  tune::io::write_json_file(dir.path() / "adapter_config.json", plain_adapter());
  const auto lora = lora_from_peft_config(dir.path() / "adapter_config.json");
  CHECK(lora.lora.rank == 8);
  CHECK(lora.lora.alpha == 16.0);
  CHECK(lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});

  auto all_linear = plain_adapter();
  all_linear["target_modules"] = "all-linear";
  tune::io::write_json_file(dir.path() / "adapter_config.json", all_linear);
  CHECK(lora_from_peft_config(dir.path() / "adapter_config.json").target_modules.size() == 7);
  // Empty patterns and lists are PEFT's "none" as much as null is.
  auto empty = plain_adapter();
  empty["modules_to_save"] = nlohmann::json::array();
  empty["layers_to_transform"] = nullptr;
  CHECK(error_of(dir, empty).empty());
}

TEST_CASE("PEFT fields that change the adapter's maths are refused by name", "[recipes][peft]") {
  tune::testing::ScratchDir dir;
  const std::vector<std::pair<std::string, nlohmann::json>> refused = {
      {"use_dora", true},
      {"use_rslora", true},
      {"rank_pattern", {{"q_proj", 16}}},
      {"alpha_pattern", {{"v_proj", 4}}},
      {"layers_to_transform", {0, 1}},
      {"modules_to_save", {"lm_head"}},
      {"bias", "all"},
      {"fan_in_fan_out", true},
      {"lora_bias", true},
      {"layer_replication", {{0, 2}}}};
  for (const auto& [field, value] : refused) {
    INFO(field);
    auto config = plain_adapter();
    config[field] = value;
    const std::string error = error_of(dir, config);
    CHECK_THAT(error, Catch::Contains("'" + field + "'") && Catch::Contains("adapter_config.json"));
  }
  auto regex = plain_adapter();
  regex["target_modules"] = ".*proj";
  CHECK_THAT(error_of(dir, regex), Catch::Contains("regular expression"));
  auto unknown = plain_adapter();
  unknown["target_modules"] = {"q_proj", "lm_head"};
  CHECK_THAT(error_of(dir, unknown), Catch::Contains("'lm_head'"));
  auto prefix = plain_adapter();
  prefix["peft_type"] = "PREFIX_TUNING";
  CHECK_THAT(error_of(dir, prefix), Catch::Contains("PREFIX_TUNING"));
  auto no_rank = plain_adapter();
  no_rank.erase("r");
  CHECK_THAT(error_of(dir, no_rank), Catch::Contains("'r'"));
}
