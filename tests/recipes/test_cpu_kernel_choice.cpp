// The run-start kernel choice (recipes/cpu_kernel_choice.h) on a tiny Llama step: the real candidates run, a fake
// clock decides which one "was faster", and the process's modes, which every product and the activation estimates
// read, follow; a second run takes the cached answer without timing anything. QLoRA's NF4 product path likewise.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/scoped_env.h"
#include "tune/core/cpu_gemm_mode.h"
#include "tune/nn/attention_core.h"
#include "tune/recipes/cpu_kernel_choice.h"
#include "tune/recipes/model_workloads.h"

namespace {

using tune::CpuGemmMode;

// measure_fastest reads the clock before and after each timed run, candidates in turn: calls 4n+1 end the first
// candidate's run, 4n+3 the second's.
tune::SecondsClock fake_clock(double first_seconds, double second_seconds) {
  auto calls = std::make_shared<int64_t>(0);
  auto now = std::make_shared<double>(0.0);
  return [=] {
    const int64_t call = (*calls)++;
    if (call % 4 == 1) *now += first_seconds;
    if (call % 4 == 3) *now += second_seconds;
    return *now;
  };
}

tune::recipes::CpuWorkload tiny_llama_step() {
  tune::models::LlamaConfig config;
  config.vocab_size = 96;
  config.hidden_size = 64;
  config.intermediate_size = 160;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  return tune::recipes::llama_workload(config, 2, 24, c10::kBFloat16, /*training=*/true);
}

std::filesystem::path fresh_cache(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("tune_cpu_kernel_choice_" + std::to_string(getpid())) / name;
  std::filesystem::remove_all(dir);
  return dir / "cpu_kernels.json";
}

// The recipes tests pin both choices through the environment (CMakeLists.txt, test_environment.cpp): lifted here.
struct Unpinned {
  tune::testing::ScopedEnv gemm{"TUNE_CPU_GEMM", std::nullopt};
  tune::testing::ScopedEnv attention{"TUNE_CPU_ATTENTION", std::nullopt};
  Unpinned() { tune::clear_measured_cpu_kernels(); }
  ~Unpinned() { tune::clear_measured_cpu_kernels(); }
};

}  // namespace

TEST_CASE("cpu kernel choice: the candidate the clock finds faster is the one every product takes", "[kernel_choice]") {
  const Unpinned unpinned;
  const tune::recipes::CpuWorkload step = tiny_llama_step();
  // First candidates (LibTorch's products, the fused attention kernel) faster.
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("first")), fake_clock(1.0, 2.0));
  CHECK(tune::cpu_gemm_mode_for(c10::kBFloat16) == CpuGemmMode::native);
  CHECK(tune::nn::uses_fused_attention(c10::DeviceType::CPU, c10::kBFloat16));
  // Second candidates faster.
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("second")), fake_clock(2.0, 1.0));
  CHECK(tune::cpu_gemm_mode_for(c10::kBFloat16) == CpuGemmMode::fp32_accumulate);
  CHECK_FALSE(tune::nn::uses_fused_attention(c10::DeviceType::CPU, c10::kBFloat16));
  // A training step's layers then take tune's recomputing core, which keeps no probabilities either.
  CHECK(tune::nn::attention_core_form(c10::DeviceType::CPU, c10::kBFloat16, /*kept_until_backward=*/true) ==
        tune::nn::AttentionCoreForm::recomputing);
  // tune's core 15% faster: it wins (no margin: neither candidate keeps [T, S] probabilities until backward).
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("close")), fake_clock(1.0, 0.85));
  CHECK_FALSE(tune::nn::uses_fused_attention(c10::DeviceType::CPU, c10::kBFloat16));
  // Within the 3% of noise: the first candidate (the fused kernel) stays.
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("noise")), fake_clock(1.0, 0.98));
  CHECK(tune::nn::uses_fused_attention(c10::DeviceType::CPU, c10::kBFloat16));
  // fp16 is a separate choice.
  CHECK(tune::cpu_gemm_mode_for(c10::kHalf) == tune::cpu_gemm_mode_for_fp16());
}

TEST_CASE("cpu kernel choice: a later run reads the cache and times nothing", "[kernel_choice]") {
  const Unpinned unpinned;
  const tune::ChoiceCache cache(fresh_cache("reuse"));
  const tune::recipes::CpuWorkload step = tiny_llama_step();
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, cache, fake_clock(2.0, 1.0));
  REQUIRE(std::filesystem::exists(cache.file()));
  tune::clear_measured_cpu_kernels();
  int64_t clock_reads = 0;
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, cache, [&clock_reads] { return double(++clock_reads); });
  CHECK(clock_reads == 0);
  CHECK(tune::cpu_gemm_mode_for(c10::kBFloat16) == CpuGemmMode::fp32_accumulate);
  CHECK_FALSE(tune::nn::uses_fused_attention(c10::DeviceType::CPU, c10::kBFloat16));
}

TEST_CASE("cpu kernel choice: TUNE_CPU_GEMM and TUNE_CPU_ATTENTION still decide, and fp32 runs measure nothing",
          "[kernel_choice]") {
  const Unpinned unpinned;
  int64_t clock_reads = 0;
  const tune::SecondsClock counting = [&clock_reads] { return double(++clock_reads); };
  {
    const tune::testing::ScopedEnv gemm("TUNE_CPU_GEMM", "fp32");
    const tune::testing::ScopedEnv attention("TUNE_CPU_ATTENTION", "fused");
    tune::recipes::choose_cpu_kernels(tiny_llama_step(), torch::kCPU, tune::ChoiceCache(fresh_cache("forced")), counting);
    CHECK(tune::cpu_gemm_mode_for(c10::kBFloat16) == CpuGemmMode::fp32_accumulate);
    CHECK(tune::nn::uses_fused_attention(c10::DeviceType::CPU, c10::kBFloat16));
  }
  tune::recipes::CpuWorkload fp32 = tiny_llama_step();
  fp32.dtype = c10::kFloat;
  tune::recipes::choose_cpu_kernels(fp32, torch::kCPU, tune::ChoiceCache(fresh_cache("fp32")), counting);
  CHECK(clock_reads == 0);
  CHECK_FALSE(tune::measured_cpu_fused_attention(c10::kBFloat16).has_value());
}

TEST_CASE("cpu kernel choice: QLoRA's NF4 products take the path the clock finds faster, or TUNE_NF4_CPU's",
          "[kernel_choice]") {
  const Unpinned unpinned;
  const tune::testing::ScopedEnv nf4{"TUNE_NF4_CPU", std::nullopt};
  tune::recipes::CpuWorkload step = tiny_llama_step();
  tune::models::LlamaConfig config;
  config.hidden_size = 64;
  config.intermediate_size = 160;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  tune::recipes::add_nf4_projections(step, config, 48, {"q_proj", "v_proj", "down_proj"});
  REQUIRE(step.nf4_projections.size() == 3);  // q [48 x 64 x 64], v [48 x 64 x 32], down [48 x 160 x 64]
  CHECK_FALSE(tune::nf4_cpu_fused_product());  // nothing measured: dequantise-then-multiply
  // The first candidate of each question (dequantise-then-multiply for NF4) faster, then the second.
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("nf4-first")), fake_clock(1.0, 2.0));
  CHECK_FALSE(tune::nf4_cpu_fused_product());
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("nf4-second")), fake_clock(2.0, 1.0));
  CHECK(tune::nf4_cpu_fused_product());
  // The environment decides over any measurement, and nothing is timed for it.
  const tune::testing::ScopedEnv forced{"TUNE_NF4_CPU", "dequantize"};
  CHECK(tune::nf4_cpu_product_forced());
  CHECK_FALSE(tune::nf4_cpu_fused_product());
}

TEST_CASE("cpu kernel choice: the recomputing core's chunk minimum is the one the clock finds faster, and cached",
          "[kernel_choice]") {
  const Unpinned unpinned;
  const tune::testing::ScopedEnv chunk{"TUNE_ATTENTION_CHUNK_ROWS", std::nullopt};
  tune::recipes::CpuWorkload step = tiny_llama_step();
  step.attentions = {{2, 600, 600, 16, /*causal=*/true}};  // long enough for 512, 256 and 128 rows to differ
  CHECK(tune::attention_chunk_min_rows() == 512);      // nothing measured: the default
  CHECK(tune::nn::recompute_chunk_rows(600) == 512);   // 2 chunks
  CHECK(tune::nn::recompute_chunk_rows(4096) == 1024);  // a quarter of long sequences whatever the minimum
  // Each clock read adds the cost of the chunk minimum in force when it is read: a candidate's run sets its own
  // minimum, so its timed run costs that minimum's figure; every other question's candidates tie (first kept).
  const auto chunk_clock = [](double at512, double at256, double at128) -> tune::SecondsClock {
    auto now = std::make_shared<double>(0.0);
    return [=] {
      const int64_t rows = tune::attention_chunk_min_rows();
      *now += rows == 128 ? at128 : rows == 256 ? at256 : at512;
      return *now;
    };
  };
  const tune::ChoiceCache cache(fresh_cache("chunk"));
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, cache, chunk_clock(2.0, 1.5, 1.0));
  CHECK(tune::cpu_gemm_mode_for(c10::kBFloat16) == CpuGemmMode::native);  // the tie keeps the first candidate
  CHECK(tune::attention_chunk_min_rows() == 128);
  CHECK(tune::nn::recompute_chunk_rows(600) == 150);  // a quarter of 600 is above 128
  CHECK(tune::nn::recompute_chunk_rows(300) == 128);
  CHECK(tune::nn::recompute_chunk_rows(100) == 100);  // never more than the queries
  // Within noise of the default: 512 stays.
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("chunk-noise")),
                                    chunk_clock(1.0, 1.5, 0.99));
  CHECK(tune::attention_chunk_min_rows() == 512);
  // A later run reads the first answer and times nothing.
  tune::clear_measured_cpu_kernels();
  int64_t clock_reads = 0;
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, cache, [&clock_reads] { return double(++clock_reads); });
  CHECK(clock_reads == 0);
  CHECK(tune::attention_chunk_min_rows() == 128);
  // Short sequences leave nothing to choose, forward-only runs have no recomputing core, and the environment decides
  // over any measurement.
  tune::clear_measured_cpu_kernels();
  step.attentions = {{2, 100, 100, 16, true}};
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("chunk-short")),
                                    chunk_clock(2.0, 1.5, 1.0));
  CHECK(tune::attention_chunk_min_rows() == 512);
  step.attentions = {{2, 600, 600, 16, true}};
  step.training = false;
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("chunk-forward")),
                                    chunk_clock(2.0, 1.5, 1.0));
  CHECK(tune::attention_chunk_min_rows() == 512);
  step.training = true;
  const tune::testing::ScopedEnv forced{"TUNE_ATTENTION_CHUNK_ROWS", "256"};
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("chunk-forced")),
                                    chunk_clock(2.0, 1.5, 1.0));
  CHECK(tune::attention_chunk_min_rows() == 256);
}

TEST_CASE("cpu kernel choice: in block recomputes tune's core recomputes unless keeping its probabilities wins by "
          "more than 20%", "[kernel_choice]") {
  const Unpinned unpinned;
  const tune::recipes::CpuWorkload step = tiny_llama_step();
  auto recomputes = [] { return tune::measured_recompute_core_recomputes(c10::kBFloat16); };
  auto form_in_recompute = [] {
    return tune::nn::attention_core_form(c10::DeviceType::CPU, c10::kBFloat16, false, false, false, true);
  };
  // Second candidates (tune's core; inside recomputes the plain core) 15% faster: tune's core wins the fused kernel,
  // and the recomputing form is kept inside recomputes (within 20%).
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("recompute-close")),
                                    fake_clock(1.0, 0.85));
  REQUIRE_FALSE(tune::nn::uses_fused_attention(c10::DeviceType::CPU, c10::kBFloat16));
  CHECK(recomputes() == true);
  CHECK(form_in_recompute() == tune::nn::AttentionCoreForm::recomputing);
  // 25% faster: the plain core inside recomputes.
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("recompute-plain")),
                                    fake_clock(1.0, 0.75));
  CHECK(recomputes() == false);
  CHECK(form_in_recompute() == tune::nn::AttentionCoreForm::plain);
  // Where the fused kernel won, nothing is asked (it runs inside recomputes too); nor for a forward alone.
  tune::clear_measured_cpu_kernels();
  tune::recipes::choose_cpu_kernels(step, torch::kCPU, tune::ChoiceCache(fresh_cache("recompute-fused")),
                                    fake_clock(1.0, 2.0));
  CHECK_FALSE(recomputes().has_value());
  tune::recipes::CpuWorkload forward = step;
  forward.training = false;
  tune::recipes::choose_cpu_kernels(forward, torch::kCPU, tune::ChoiceCache(fresh_cache("recompute-forward")),
                                    fake_clock(1.0, 0.85));
  CHECK_FALSE(recomputes().has_value());
}

TEST_CASE("cpu kernel choice: large shapes are measured at about a GFLOP per product", "[kernel_choice]") {
  const auto measured = tune::recipes::measured_projections(
      {{8192, 4096, 14336}, {8192, 4096, 4096}, {8192, 4096, 4096}, {512, 256, 672}, {0, 5, 5}});
  REQUIRE(measured.size() == 2);  // the repeated shape once, the empty one dropped
  CHECK(measured[0].inner == 2048);
  CHECK(measured[0].columns == 2048);
  CHECK(measured[0].rows == 128);  // 2^30 / (2 * 2048 * 2048) = 128 rows
  CHECK(measured[1].rows == 512);  // small shapes as they are
  CHECK(measured[1].inner == 256);
  CHECK(measured[1].columns == 672);
  const auto attention = tune::recipes::measured_attention({32 * 4, 4096, 4096, 128, true});
  CHECK(attention.queries == 2048);
  CHECK(attention.keys == 2048);
  CHECK(attention.batch_heads == 1);
}
