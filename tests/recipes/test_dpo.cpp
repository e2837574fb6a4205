// The DPO recipe against TRL itself: tests/fixtures/dpo (scripts/make_dpo_fixture.py, trl 1.16.0) holds TRL's
// token ids for preference rows in every form, its keep_start truncation, and its first step on a tiny Llama
// (losses, per-sequence log-probs, logged metrics, gradients) for each loss with a LoRA (adapters off) and a
// separate reference, and for the reference-free CPO-SimPO and ORPO. Everything in float32 on the CPU.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tune/core/error.h"
#include "tune/data/preference_dataset.h"
#include "tune/data/preference_loader.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/recipes/dpo/dpo_step.h"
#include "tune/recipes/sft/sft_model.h"

using namespace tune;

namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(TUNE_SOURCE_DIR) / "tests/fixtures/dpo" / name;
}

const nlohmann::json& json_file(const std::string& name) {
  static std::map<std::string, nlohmann::json> files;
  auto& json = files[name];
  if (json.is_null()) json = nlohmann::json::parse(std::ifstream(fixture(name)));
  return json;
}

std::vector<int64_t> ids(const nlohmann::json& list) { return list.get<std::vector<int64_t>>(); }

const data::Tokenizer& tokenizer() {
  static const data::Tokenizer loaded = data::Tokenizer::load(fixture("model"));
  return loaded;
}

std::vector<data::TokenizedPair> tokenized(const std::string& file, int64_t max_length = 0) {
  const auto rows = data::read_preference_file(fixture(file), data::OnBadLine::fail);
  return data::tokenize_pairs(rows, tokenizer(), data::ChatTemplate::resolve("auto", tokenizer()), max_length);
}

// The policy as TRL's case had it: model/ fully, or model/ + the adapter_init LoRA (rank 4, alpha 8, every
// projection); weights in fp32.
models::LlamaForCausalLM policy_model(bool lora) {
  recipes::sft::SftSettings settings;
  settings.model.path = fixture("model").string();
  if (lora) {
    settings.model.lora.lora.rank = 4;
    settings.model.lora.lora.alpha = 8.0;
    settings.model.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  }
  models::LlamaForCausalLM model = recipes::sft::build_model(settings, tokenizer(), 0);
  if (lora) {
    io::LoadOptions options;
    options.prefix = "base_model.model.";
    options.ignore_missing_containing = {""};  // the adapter file holds the LoRA tensors only
    const size_t loaded =
        io::load_into_module(*model, io::WeightSource::open_file(fixture("adapter_init.safetensors")), options);
    REQUIRE(loaded == 28);
  }
  model->train();
  return model;
}

models::LlamaForCausalLM reference_model() {
  recipes::sft::SftSettings settings;
  settings.model.path = fixture("ref_model").string();
  return recipes::sft::build_model(settings, tokenizer(), 0, false, recipes::sft::ModelUse::inference);
}

data::PreferenceBatch standard_batch() {
  const auto pairs = tokenized("rows_standard.jsonl");
  std::vector<const data::TokenizedPair*> all;
  for (const auto& pair : pairs) all.push_back(&pair);
  return data::collate_pairs(all);
}

void check_close(const torch::Tensor& actual, const nlohmann::json& expected, double tolerance, const std::string& what) {
  const torch::Tensor want = torch::tensor(expected.get<std::vector<double>>(), torch::kDouble);
  INFO(what << ": tune " << actual << " TRL " << want);
  CHECK(torch::allclose(actual.detach().to(torch::kDouble), want, tolerance, tolerance));
}

void check_close(double actual, double expected, double tolerance, const std::string& what) {
  INFO(what << ": tune " << actual << " TRL " << expected);
  CHECK(std::abs(actual - expected) <= tolerance * std::max(1.0, std::abs(expected)));
}

// The fixture's gradient of every trainable parameter, by TRL's name (PEFT's for LoRA, HF's otherwise).
void check_gradients(const models::LlamaForCausalLM& model, const std::string& case_name, bool lora) {
  const auto grads = io::SafetensorsFile::open(fixture("cases.safetensors"));
  int64_t compared = 0;
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    const std::string name = case_name + "/" + (lora ? "base_model.model." : "") + item.key();
    INFO(name);
    REQUIRE(item.value().grad().defined());
    const torch::Tensor expected = grads.load(name);
    const torch::Tensor actual = item.value().grad();
    const double scale = std::max(1e-3, expected.abs().max().item<double>());
    CHECK((actual - expected).abs().max().item<double>() <= 1e-5 * scale);
    ++compared;
  }
  CHECK(compared == (lora ? 28 : 21));
}

}  // namespace

TEST_CASE("dpo data: every row form tokenizes to TRL's prompt, chosen and rejected ids", "[dpo]") {
  for (const std::string file : {"rows_standard.jsonl", "rows_conversational.jsonl", "rows_implicit.jsonl"}) {
    const auto& expected = json_file("tokenized.json")["files"][file];
    const auto pairs = tokenized(file);
    REQUIRE(pairs.size() == expected.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
      INFO(file << " row " << i);
      CHECK(pairs[i].prompt_ids == ids(expected[i]["prompt_ids"]));
      CHECK(pairs[i].chosen_ids == ids(expected[i]["chosen_ids"]));
      CHECK(pairs[i].rejected_ids == ids(expected[i]["rejected_ids"]));
    }
  }
}

TEST_CASE("dpo data: keep_start truncation drops a prompt that fills max_length and cuts completions as TRL", "[dpo]") {
  const auto& truncation = json_file("tokenized.json")["truncation"];
  const int64_t max_length = truncation["max_length"].get<int64_t>();
  data::PreferenceTokenizeReport report;
  const auto rows = data::read_preference_file(fixture("rows_standard.jsonl"), data::OnBadLine::fail);
  const auto pairs =
      data::tokenize_pairs(rows, tokenizer(), data::ChatTemplate::resolve("auto", tokenizer()), max_length, &report);
  CHECK(report.dropped_prompt_too_long == static_cast<int64_t>(truncation["dropped_rows"].size()));
  REQUIRE(pairs.size() == truncation["kept_rows"].size());
  // TRL's collated rows: chosen of each kept pair, then rejected; compare the tokens under its attention mask and
  // the completion mask against tune's labels.
  std::vector<const data::TokenizedPair*> all;
  for (const auto& pair : pairs) all.push_back(&pair);
  const data::PreferenceBatch batch = data::collate_pairs(all);
  const auto& collated = truncation["collated"];
  for (int64_t row = 0; row < batch.input_ids.size(0); ++row) {
    const auto want_ids = ids(collated["input_ids"][row]);
    const auto mask = ids(collated["attention_mask"][row]);
    const auto completion = ids(collated["completion_mask"][row]);
    for (size_t t = 0; t < want_ids.size(); ++t) {
      INFO("row " << row << " position " << t);
      const bool token = mask[t] == 1;
      CHECK((t < static_cast<size_t>(batch.input_ids.size(1)) && batch.segment_ids[row][t].item<int64_t>() >= 0) ==
            token);
      if (!token) continue;
      CHECK(batch.input_ids[row][t].item<int64_t>() == want_ids[t]);
      CHECK((batch.labels[row][t].item<int64_t>() != data::kIgnoreIndex) == (completion[t] == 1));
    }
  }
}

TEST_CASE("dpo: first-step loss, log-probs, rewards and gradients equal TRL's for every loss and reference", "[dpo]") {
  const auto& cases = json_file("cases.json")["cases"];
  // Each case twice: one sequence per row as TRL pads them, and packed without padding (pack_pairs: the fixture's
  // six sequences fit fewer rows of the batch's width).
  const data::PreferenceBatch padded = standard_batch();
  const data::PreferenceBatch packed = data::pack_pairs(padded);
  REQUIRE(packed.packed);
  REQUIRE(packed.input_ids.size(0) < padded.input_ids.size(0));
  const torch::Device cpu(torch::kCPU);
  for (const auto& [name, spec] : cases.items()) for (const bool pack : {false, true}) {
    const data::PreferenceBatch& batch = pack ? packed : padded;
    DYNAMIC_SECTION(name << (pack ? " (packed)" : "")) {
      const bool lora = spec["policy"] == "lora";
      const bool reference_free = !spec.contains("reference_chosen_logps");
      train::PreferenceLossOptions options;
      options.type = train::preference_loss_from_name(spec["loss_type"].get<std::string>());
      options.beta = spec["beta"].get<double>();
      if (spec.contains("label_smoothing")) options.label_smoothing = spec["label_smoothing"].get<double>();
      if (spec.contains("simpo_gamma")) options.simpo_gamma = spec["simpo_gamma"].get<double>();
      models::LlamaForCausalLM policy = policy_model(lora);
      std::optional<models::LlamaForCausalLM> reference;
      if (!reference_free && !lora) reference = reference_model();

      train::PairLogps reference_logps;
      if (!reference_free) {
        reference_logps = recipes::dpo::reference_pair_logps(policy, reference ? &*reference : nullptr, batch, cpu);
        check_close(reference_logps.chosen, spec["reference_chosen_logps"], 1e-5, "reference chosen log-probs");
        check_close(reference_logps.rejected, spec["reference_rejected_logps"], 1e-5, "reference rejected log-probs");
      }
      const bool orpo = options.type == train::PreferenceLossType::orpo;
      const train::PairLogps logps = recipes::dpo::pair_logps(policy, batch, cpu, orpo);
      const bool averaged = spec.value("logps_are_token_means", false);
      check_close(averaged ? logps.chosen / logps.chosen_tokens : logps.chosen, spec["policy_chosen_logps"], 1e-5,
                  "policy chosen log-probs");
      check_close(averaged ? logps.rejected / logps.rejected_tokens : logps.rejected, spec["policy_rejected_logps"],
                  1e-5, "policy rejected log-probs");
      const auto counts = ids(spec["completion_token_counts"]);
      CHECK(torch::equal(torch::cat({logps.chosen_tokens, logps.rejected_tokens}).to(torch::kLong),
                         torch::tensor(counts)));

      const train::PreferenceLossTerms terms = train::preference_loss(logps, reference_logps, options);
      torch::Tensor loss = terms.per_pair.mean();
      if (orpo) {
        CHECK(recipes::dpo::chosen_sequence_tokens(batch) == spec["nll_token_count"].get<int64_t>());
        loss = loss + terms.nll_sum / static_cast<double>(recipes::dpo::chosen_sequence_tokens(batch));
      }
      check_close(loss.item<double>(), spec["loss"].get<double>(), 1e-5, "loss");
      recipes::dpo::PreferenceTally tally;
      tally.add(terms, logps, options.type);
      for (const auto& [metric, value] : tally.means()) {
        if (metric == "nll_loss") {
          check_close(value, spec["nll_loss"].get<double>(), 1e-5, metric);
        } else {
          check_close(value, spec["metrics"][metric].get<double>(), 1e-5, metric);
        }
      }
      loss.backward();
      if (spec.value("gradients_stored", true)) check_gradients(policy, name, lora);
    }
  }
}

TEST_CASE("dpo data: bad rows name FILE:LINE and what was expected", "[dpo]") {
  const auto dir = std::filesystem::temp_directory_path() / "tune-dpo-bad-rows";
  std::filesystem::create_directories(dir);
  auto expect_error = [&](const std::string& text, const std::string& fragment) {
    const auto file = dir / "rows.jsonl";
    std::ofstream(file) << text;
    INFO(text);
    CHECK_THROWS_WITH(data::read_preference_file(file, data::OnBadLine::fail),
                      Catch::Contains(fragment) && Catch::Contains("rows.jsonl:"));
  };
  expect_error("{\"prompt\": \"a\", \"chosen\": \"b\"}\n", "missing field 'rejected'");
  expect_error("{\"prompt\": \"a\", \"chosen\": [], \"rejected\": \"c\"}\n", "field 'chosen' must be a string");
  expect_error("{\"prompt\": [{\"role\": \"user\", \"content\": \"q\"}], \"chosen\": [{\"role\": \"user\", "
               "\"content\": \"x\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"y\"}]}\n",
               "chosen[0].role is 'user'");
  expect_error("{\"prompt\": [{\"role\": \"assistant\", \"content\": \"q\"}], \"chosen\": [{\"role\": \"assistant\", "
               "\"content\": \"x\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"y\"}]}\n",
               "prompt[0].role is 'assistant'");
  expect_error("{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n{\"chosen\": \"ab\", \"rejected\": \"ac\"}\n",
               "one file holds one form");
  expect_error("not json\n", "not valid JSON");
  // skip: the bad row is counted, the good ones kept.
  const auto file = dir / "rows.jsonl";
  std::ofstream(file) << "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n{\"prompt\": \"a\"}\n";
  data::ReadReport report;
  CHECK(data::read_preference_file(file, data::OnBadLine::skip, &report).size() == 1);
  CHECK(report.rows_skipped == 1);
  std::filesystem::remove_all(dir);
}
