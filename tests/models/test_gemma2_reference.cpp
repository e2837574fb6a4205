// tune's gemma2 variant against transformers' Gemma2ForCausalLM and Gemma2Model (scripts/make_gemma2_fixtures.py,
// run by CTest as gemma2_fixtures_setup into the build tree): logits and final-norm hidden states of a right-padded
// batch, greedy generation through the KV cache, the loss and gradients under selective checkpointing (whose
// attention recompute must apply the soft cap too), and the text encoder's loader for a pipeline's text_encoder/.
// Without transformers the fixture holds SKIPPED and the test exits 77 (reported skipped, never passed).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/reference_fixture.h"
#include "tune/io/safetensors.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/gemma2_text_encoder.h"
#include "tune/models/llama.h"
#include "tune/recipes/sft/generate.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/train/linear_cross_entropy.h"
#include "tune/train/loss.h"
#include "tune/train/sequence_logps.h"

using namespace tune;

namespace {

std::filesystem::path fixture(const std::string& name) {
  const auto root = test::reference_fixture_dir("gemma2_fixtures");
  test::skip_if_fixture_skipped(root);
  return root / name;
}

io::SafetensorsFile reference(const std::string& name) {
  return io::SafetensorsFile::open(fixture(name) / "reference.safetensors");
}

models::LlamaForCausalLM load_lm(const models::LlamaConfig& config) {
  models::LlamaForCausalLM model(config);
  recipes::sft::load_model_weights(model, fixture("gemma2_lm"));
  model->eval();
  return model;
}

models::LlamaForCausalLM load_lm() {
  return load_lm(models::LlamaConfig::from_file((fixture("gemma2_lm") / "config.json").string()));
}

// transformers' attention_mask as tune's segments: padding is segment -1, which no real token attends to.
models::AttentionInputs padded(const torch::Tensor& attention_mask) {
  models::AttentionInputs inputs;
  inputs.segment_ids = torch::where(attention_mask.ne(0), 0, -1).to(torch::kInt64);
  return inputs;
}

// max |a - b| over the positions attention_mask marks real ([B, L] against [B, L, D]).
double max_diff_real(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& attention_mask) {
  const auto keep = attention_mask.ne(0).unsqueeze(-1).expand_as(a);
  return (a.masked_select(keep).to(torch::kFloat64) - b.masked_select(keep).to(torch::kFloat64)).abs().max().item<double>();
}

std::vector<int64_t> to_vector(const torch::Tensor& ids) {
  const auto contiguous = ids.to(torch::kInt64).contiguous();
  return {contiguous.data_ptr<int64_t>(), contiguous.data_ptr<int64_t>() + contiguous.numel()};
}

}  // namespace

TEST_CASE("gemma2 config.json: the fixture's values are read, and its layer types by Gemma2Config's rule",
          "[models][gemma2]") {
  const auto config = models::LlamaConfig::from_file((fixture("gemma2_lm") / "config.json").string());
  CHECK(config.is_gemma2());
  CHECK(config.architecture == "Gemma2ForCausalLM");
  CHECK(config.resolved_head_dim() == 32);
  CHECK(config.attention_scale() == Approx(1.0 / std::sqrt(24.0)));
  CHECK(config.attn_logit_softcapping == 5.0);
  CHECK(config.final_logit_softcapping == 3.0);
  CHECK(config.hidden_act == "gelu_pytorch_tanh");
  CHECK(config.tie_word_embeddings);
  for (int64_t layer = 0; layer < 4; ++layer) CHECK(config.layer_sliding_window(layer) == (layer % 2 == 0 ? 4 : 0));
  CHECK(models::LlamaConfig::from_json(config.to_json(), "round trip") == config);
}

TEST_CASE("gemma2 fp32 logits and hidden states of a right-padded batch equal transformers' within 1e-5",
          "[models][gemma2]") {
  torch::NoGradGuard no_grad;
  auto model = load_lm();
  const auto expected = reference("gemma2_lm");
  const auto ids = expected.load("input_ids");
  const auto mask = expected.load("attention_mask");
  REQUIRE(mask.sum().item<int64_t>() < mask.numel());  // one row is padded
  const auto logits = model->forward(ids, padded(mask));
  const auto hidden = model->forward_hidden(ids, padded(mask));
  REQUIRE(logits.sizes() == expected.load("logits").sizes());
  const double logits_difference = max_diff_real(logits, expected.load("logits"), mask);
  const double hidden_difference = max_diff_real(hidden, expected.load("hidden"), mask);
  UNSCOPED_INFO("gemma2: max |tune - transformers| logits " << logits_difference << ", hidden " << hidden_difference);
  CHECK(logits_difference < 1e-5);
  CHECK(hidden_difference < 1e-5);
}

TEST_CASE("the gemma2 fixture depends on both soft caps, the sliding window and the attention scale",
          "[models][gemma2]") {
  // The same weights without one of them give other logits: the 1e-5 agreement above is evidence of each.
  torch::NoGradGuard no_grad;
  const auto expected = reference("gemma2_lm");
  const auto ids = expected.load("input_ids");
  const auto mask = expected.load("attention_mask");
  const auto base = models::LlamaConfig::from_file((fixture("gemma2_lm") / "config.json").string());
  auto no_attention_cap = base, no_final_cap = base, no_window = base, head_dim_scale = base;
  no_attention_cap.attn_logit_softcapping = 0;
  no_final_cap.final_logit_softcapping = 0;
  no_window.sliding_window = 0;
  head_dim_scale.query_pre_attn_scalar = 0;
  for (const auto& [what, config] : {std::pair{"attention cap", no_attention_cap}, std::pair{"final cap", no_final_cap},
                                     std::pair{"window", no_window}, std::pair{"scale", head_dim_scale}}) {
    INFO("without the " << what);
    auto model = load_lm(config);
    CHECK(max_diff_real(model->forward(ids, padded(mask)), expected.load("logits"), mask) > 1e-2);
  }
}

TEST_CASE("gemma2 greedy generation through the KV cache gives transformers' generate() ids", "[models][gemma2]") {
  auto model = load_lm();
  const auto expected_file = reference("gemma2_lm");
  const auto expected = to_vector(expected_file.load("greedy_ids"));
  recipes::sft::SamplingOptions options;  // temperature 0: greedy; no stop ids, as the fixture generates
  options.max_new_tokens = static_cast<int64_t>(expected.size());
  const auto prompt = to_vector(expected_file.load("input_ids")[0]);
  CHECK(recipes::sft::generate(model, prompt, options, precision::MixedPrecision::no, torch::kCPU) == expected);
}

TEST_CASE("gemma2 loss and gradients equal transformers' under selective checkpointing, chunked or plain loss",
          "[models][gemma2]") {
  // Selective checkpointing recomputes the attention core in backward (attention_core_recomputing_probabilities):
  // its gradient must go through the soft cap as transformers' autograd does. The chunked loss caps the logits
  // itself (it never calls the LM head).
  const auto expected = reference("gemma2_lm");
  const auto ids = expected.load("input_ids");
  const auto mask = expected.load("attention_mask");
  const auto labels = expected.load("labels");
  const double counted = static_cast<double>(train::causal_lm_loss_tokens(labels));
  for (const bool chunked : {true, false}) {
    INFO((chunked ? "chunked" : "plain") << " loss");
    auto model = load_lm();
    model->train();
    model->set_block_runner(std::make_shared<memory::CheckpointRunner>(
        memory::CheckpointOptions{memory::Policy::selective, 2}, model->num_blocks()));
    const torch::Tensor loss_sum =
        chunked ? train::causal_lm_linear_loss_sum(model->forward_hidden(ids, padded(mask)), model->output_weight(),
                                                   labels, /*chunk_rows=*/5, model->output_softcap())
                : train::causal_lm_loss_sum(model->forward(ids, padded(mask)), labels);
    const torch::Tensor loss = loss_sum / counted;
    loss.backward();
    const double loss_difference = std::abs(loss.item<double>() - expected.load("loss").item<double>());
    UNSCOPED_INFO("gemma2 " << (chunked ? "chunked" : "plain") << ": |loss - transformers'| " << loss_difference);
    CHECK(loss_difference < 1e-5);
    const auto parameters = model->named_parameters();
    for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                             "model.layers.1.self_attn.k_proj.weight",
                             "model.layers.3.post_feedforward_layernorm.weight"}) {
      INFO(name);
      const torch::Tensor grad = parameters[name].grad();
      REQUIRE(grad.defined());
      const double difference = test::relative_max_diff(grad, expected.load(std::string("grad.") + name));
      UNSCOPED_INFO("  " << name << ": max |grad diff| / max |grad| " << difference);
      CHECK(difference < 1e-4);
    }
  }
}

TEST_CASE("Gemma2TextEncoder loads a pipeline's text_encoder/ (prefix-less names, one file or shards) and gives "
          "transformers' last_hidden_state within 1e-5",
          "[models][gemma2]") {
  torch::NoGradGuard no_grad;
  for (const char* directory : {"text_encoder", "text_encoder_sharded"}) {
    INFO(directory);
    auto encoder = models::Gemma2TextEncoder::load(fixture(directory));
    CHECK(encoder.config().architecture == "Gemma2Model");
    const auto expected = reference(directory);
    const auto mask = expected.load("attention_mask");
    REQUIRE(mask.sum().item<int64_t>() < mask.numel());
    const auto hidden = encoder.forward(expected.load("input_ids"), mask);
    REQUIRE(hidden.sizes() == expected.load("last_hidden_state").sizes());
    const double difference = max_diff_real(hidden, expected.load("last_hidden_state"), mask);
    UNSCOPED_INFO(directory << ": max |tune - transformers| last_hidden_state " << difference);
    CHECK(difference < 1e-5);
  }
}

TEST_CASE("Gemma2TextEncoder also reads a Gemma2ForCausalLM directory and gives its trunk's hidden states",
          "[models][gemma2]") {
  torch::NoGradGuard no_grad;
  auto encoder = models::Gemma2TextEncoder::load(fixture("gemma2_lm"));
  const auto expected = reference("gemma2_lm");
  const auto mask = expected.load("attention_mask");
  const auto hidden = encoder.forward(expected.load("input_ids"), mask);
  CHECK(max_diff_real(hidden, expected.load("hidden"), mask) < 1e-5);
}

TEST_CASE("Gemma2TextEncoder in bf16 stays near transformers' fp32 states", "[models][gemma2]") {
  torch::NoGradGuard no_grad;
  auto encoder = models::Gemma2TextEncoder::load(fixture("text_encoder"), torch::kBFloat16);
  const auto expected = reference("text_encoder");
  const auto mask = expected.load("attention_mask");
  const auto hidden = encoder.forward(expected.load("input_ids"), mask);
  CHECK(hidden.scalar_type() == torch::kBFloat16);
  CHECK(test::relative_max_diff(hidden, expected.load("last_hidden_state"), mask) < 0.05);
}

TEST_CASE("gemma2 per-row sequence log-probs (DPO's) take the final soft cap as transformers' logits do",
          "[models][gemma2]") {
  torch::NoGradGuard no_grad;
  auto model = load_lm();
  const auto expected = reference("gemma2_lm");
  const auto ids = expected.load("input_ids");
  const auto hidden = model->forward_hidden(ids, padded(expected.load("attention_mask")));
  const auto logps = train::causal_lm_sequence_logps(hidden, model->output_weight(), expected.load("labels"),
                                                     /*chunk_rows=*/4, model->output_softcap());
  const double difference = (logps.sums.to(torch::kFloat64) - expected.load("row_logps").to(torch::kFloat64)).abs().max().item<double>();
  UNSCOPED_INFO("gemma2: max |row log-prob difference| " << difference);
  CHECK(difference < 1e-4);  // sums of 11 log-probabilities of order 5
}
